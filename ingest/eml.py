"""E-mail (``.eml``, RFC 5322 / MIME) with the standard library's ``email`` package.

- The subject is the title; From, To, Cc and Date open the text (so they are searchable)
  and become metadata (``email_from``, ``email_to``, ``email_cc``, ``email_date``), under
  whatever metadata the connector gave, which wins.
- The body: of a ``multipart/alternative`` the HTML part (it keeps tables and lists), else
  the plain one; HTML goes through the HTML parser.
- Attachments of a supported type are parsed here (in the parse worker, under its limits)
  and returned beside the message as ``ParsedDocument.attachments``: the ingestion job makes
  each a document of its own, ``<message id>#attachment=N`` (N counts every attachment from
  1, as the IMAP connector does), with the message's ACL, its pushed metadata and its
  ``email_*`` headers (``ingest.pipeline.attachment_source``). The message's text holds
  none of theirs. The others are
  named in the warnings: ``attachment_skipped`` (an unsupported type, past
  ``MAX_ATTACHMENT_BYTES``, past ``MAX_ATTACHMENTS``) or ``attachment_failed`` (its parser's
  reason code); never silently dropped.
- The MIME tree is walked without recursion, at most ``MAX_DEPTH`` levels and ``MAX_PARTS``
  parts; a message nesting more multiparts than ``MAX_MULTIPARTS`` fails as
  ``mime_too_complex`` before the parser (whose recursion it would exhaust) sees it.
"""

from __future__ import annotations

import email
import email.policy
import email.utils
import hashlib
import re
from collections.abc import Callable
from dataclasses import replace
from email.message import Message

from core.errors import ParseError
from core.records import ParsedAttachment, ParsedDocument, SectionKind
from ingest.decoding import decode_text
from ingest.html import html_blocks
from ingest.limits import check_deadline
from ingest.text import Block, assemble, split_paragraphs

MAX_DEPTH = 10
MAX_PARTS = 200
MAX_MULTIPARTS = 50
MAX_ATTACHMENTS = 20  # parsed per message; the rest are listed as skipped
MAX_ATTACHMENT_BYTES = 16 * 1024 * 1024
_MAX_HEADER_CHARS = 1000
_BOUNDARY = re.compile(rb"boundary\s*=", re.IGNORECASE)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")

# Parses an attachment's bytes (declared MIME type, file name): the type it was parsed as and
# the document, or why not; None: not a supported type.
AttachmentParser = Callable[[bytes, str, str], tuple[str, ParsedDocument] | ParseError | None]


def parse(data: bytes, parse_attachment: AttachmentParser | None = None) -> ParsedDocument:
    """Parse one e-mail message.

    Args:
        data: The message bytes.
        parse_attachment: Parses an attachment (bytes, MIME type, file name); without it
            every attachment is listed as skipped.

    Raises:
        ParseError: ``mime_too_complex`` (too many nested multiparts), ``corrupt_document``.
    """
    if len(_BOUNDARY.findall(data)) > MAX_MULTIPARTS:
        raise ParseError(f"the message nests more than {MAX_MULTIPARTS} multiparts", code="mime_too_complex")
    try:
        message = email.message_from_bytes(data, policy=email.policy.default)
    except RecursionError as exc:
        raise ParseError("the message's MIME structure is too deep", code="mime_too_complex") from exc
    headers, metadata = _headers(message)
    blocks: list[Block] = [Block(headers, SectionKind.PARAGRAPH)] if headers else []
    warnings: list[str] = []
    attachments: list[tuple[str, str, bytes]] = []
    for part in _leaves(message, warnings):
        check_deadline()
        name = _filename(part)
        if (
            part.get_content_disposition() != "attachment"
            and not name
            and part.get_content_maintype() == "text"
        ):
            blocks.extend(_body(part, warnings))
        else:
            payload = part.get_payload(decode=True)
            content = payload if isinstance(payload, bytes) else b""
            attachments.append((name or "unnamed", part.get_content_type(), content))
    parsed = [
        found
        for number, (name, mime, content) in enumerate(attachments, start=1)
        if (found := _attachment(number, name, mime, content, parse_attachment, warnings)) is not None
    ]
    subject = _header(message, "subject")
    document = assemble(blocks, title=subject or None, warnings=tuple(warnings))
    return replace(document, metadata=metadata, attachments=tuple(parsed))


def _leaves(message: Message, warnings: list[str]) -> list[Message]:
    """The non-multipart parts in order; one part of each ``multipart/alternative``."""
    out: list[Message] = []
    stack: list[tuple[Message, int]] = [(message, 0)]
    parts = 0
    while stack:
        part, depth = stack.pop()
        parts += 1
        if parts > MAX_PARTS or depth > MAX_DEPTH:
            warnings.append(f"mime_parts_skipped: past {MAX_PARTS} parts or {MAX_DEPTH} levels")
            break
        if not part.is_multipart():
            out.append(part)
            continue
        children = [child for child in part.get_payload() if isinstance(child, Message)]
        if part.get_content_subtype() == "alternative" and children:
            children = [_preferred(children)]
        stack.extend((child, depth + 1) for child in reversed(children))
    return out


def _preferred(children: list[Message]) -> Message:
    for wanted in ("text/html", "text/plain"):
        for child in children:
            if child.get_content_type() == wanted:
                return child
    return children[-1]


def _body(part: Message, warnings: list[str]) -> list[Block]:
    raw = part.get_payload(decode=True) or b""
    if not isinstance(raw, bytes):
        return []
    if part.get_content_subtype() == "html":
        blocks, _title, _warnings = html_blocks(raw)
        return blocks
    charset = part.get_content_charset()
    try:
        text = raw.decode(charset) if charset else None
    except (LookupError, UnicodeDecodeError):
        text = None
    if text is None:
        text, decode_warnings = decode_text(raw)
        warnings.extend(decode_warnings)
    return [Block(paragraph, SectionKind.PARAGRAPH) for paragraph in split_paragraphs(text)]


def _attachment(
    number: int,
    name: str,
    mime: str,
    content: bytes,
    parse_attachment: AttachmentParser | None,
    warnings: list[str],
) -> ParsedAttachment | None:
    """The attachment parsed, or None with the reason in ``warnings``."""
    label = f"{name[:100]} ({mime[:100]}"
    if number > MAX_ATTACHMENTS:
        warnings.append(f"attachment_skipped: {label}, past {MAX_ATTACHMENTS} attachments)")
        return None
    if len(content) > MAX_ATTACHMENT_BYTES:
        warnings.append(f"attachment_skipped: {label}, {len(content)} bytes, over {MAX_ATTACHMENT_BYTES})")
        return None
    result = parse_attachment(content, mime, name) if parse_attachment and content else None
    if result is None:
        warnings.append(f"attachment_skipped: {label}, unsupported type)")
        return None
    if isinstance(result, ParseError):
        warnings.append(f"attachment_failed: {label}, {result.code})")
        return None
    parsed_as, document = result
    digest = hashlib.sha256(content).hexdigest()
    return ParsedAttachment(number, name, parsed_as, digest, len(content), document)


def _headers(message: Message) -> tuple[str, dict[str, str]]:
    lines: list[str] = []
    metadata: dict[str, str] = {}
    for field in ("from", "to", "cc", "date"):
        value = _header(message, field)
        if not value:
            continue
        lines.append(f"{field.capitalize()}: {value}")
        metadata[f"email_{field}"] = _iso_date(value) if field == "date" else value
    return "\n".join(lines), metadata


def _header(message: Message, name: str) -> str:
    try:
        value = message.get(name)
    except (ValueError, IndexError, AttributeError):  # a malformed header the policy cannot parse
        return ""
    return _CONTROL.sub("", " ".join(str(value or "").split()))[:_MAX_HEADER_CHARS]


def _iso_date(value: str) -> str:
    try:
        return email.utils.parsedate_to_datetime(value).isoformat()
    except (TypeError, ValueError, IndexError):
        return value


def _filename(part: Message) -> str:
    try:
        return _CONTROL.sub("", part.get_filename() or "")[:200]
    except (ValueError, IndexError, AttributeError):
        return ""
