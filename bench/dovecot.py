"""A real Dovecot IMAP server (Debian's ``dovecot-imapd``) on a loopback port, for the IMAP
connector's tests and ``bench.connectors``, with its own configuration under a temporary
directory: passwd-file users, maildir under the same
directory, a shared namespace and the ACL plugin (RFC 4314 GETACL/SETACL/MYRIGHTS).

Run as root, Dovecot refuses to serve mail as uid 0 and to run its login processes as root,
so mail belongs to the ``dovecot`` system user and logins run as ``dovenull`` (both created
by the Debian package); not root, the whole server runs as the current user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from testkit.ports import free_port

CONFIG = """
protocols = imap
listen = 127.0.0.1
base_dir = {root}/run
state_dir = {root}/state
instance_name = ragline-test-{port}
log_path = {root}/dovecot.log
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain
default_internal_user = {internal}
default_internal_group = {internal_group}
default_login_user = {login}
first_valid_uid = 1
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%n {root}/passwd
}}
userdb {{
  driver = static
  args = uid={mail_uid} gid={mail_gid} home={root}/mail/%n
}}
mail_location = maildir:{root}/mail/%n/Maildir
mail_plugins = acl
namespace inbox {{
  inbox = yes
  separator = /
  prefix =
}}
namespace {{
  type = shared
  separator = /
  prefix = shared/%%n/
  location = maildir:{root}/mail/%%n/Maildir:INDEXPVT={root}/mail/%n/shared/%%n
  subscriptions = no
  list = children
}}
protocol imap {{
  mail_plugins = $mail_plugins imap_acl
}}
plugin {{
  acl = vfile
  acl_shared_dict = file:{root}/state/shared-mailboxes.db
}}
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {port}
  }}
  inet_listener imaps {{
    port = 0
  }}
  chroot =
}}
service anvil {{
  chroot =
}}
service auth {{
  user = {auth_user}
}}
service auth-worker {{
  user = {auth_user}
}}
"""


@dataclass(frozen=True, slots=True)
class Dovecot:
    host: str
    port: int
    password: str


def available() -> bool:
    return shutil.which("dovecot") is not None


@contextmanager
def dovecot(users: tuple[str, ...] = ("ann", "bob")) -> Iterator[Dovecot]:
    """Start Dovecot with ``users`` (password ``secret``); stopped and removed at exit."""
    # Not under pytest's tmp_path: that is private to root (0700) and mail is not served as root.
    root = Path(tempfile.mkdtemp(prefix="ragline-dovecot-"))
    root.chmod(0o755)
    port = free_port()
    if os.geteuid() == 0:
        mail = pwd.getpwnam("dovecot")
        names = {"internal": "dovecot", "internal_group": "dovecot", "login": "dovenull", "auth_user": "root"}
        uid, gid = mail.pw_uid, mail.pw_gid
    else:
        me = pwd.getpwuid(os.geteuid())
        names = {"internal": me.pw_name, "internal_group": me.pw_name, "login": me.pw_name}
        names["auth_user"] = me.pw_name
        uid, gid = me.pw_uid, me.pw_gid
    for sub in ("mail", "state", "run"):
        (root / sub).mkdir()
        os.chown(root / sub, uid, gid)
    (root / "passwd").write_text("".join(f"{u}:{{PLAIN}}secret:::::\n" for u in users))
    (root / "passwd").chmod(0o644)
    conf = root / "dovecot.conf"
    conf.write_text(CONFIG.format(root=root, port=port, mail_uid=uid, mail_gid=gid, **names))
    try:
        # Not captured: the daemon inherits the streams and would hold a pipe open forever.
        with (root / "start.log").open("wb") as log:
            started = subprocess.run(["dovecot", "-c", str(conf)], stdout=log, stderr=log, timeout=30)
        if started.returncode != 0:
            raise RuntimeError(f"dovecot did not start: {(root / 'start.log').read_text()[-2000:]}")
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                    if s.recv(100).startswith(b"* OK"):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"dovecot did not start: {(root / 'dovecot.log').read_text()[-2000:]}")
            time.sleep(0.1)
        yield Dovecot("127.0.0.1", port, "secret")
    finally:
        subprocess.run(
            ["dovecot", "-c", str(conf), "stop"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=30,
        )
        pid_file = root / "run" / "master.pid"
        deadline = time.monotonic() + 10
        while pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        shutil.rmtree(root, ignore_errors=True)
