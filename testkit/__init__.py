"""The harness shared by the tests and the benchmarks: free ports, ``ragline serve`` as a
subprocess, throwaway PostgreSQL clusters, instrumented embedders.

A top-level package of the repository, not of the installed distribution (pyproject's
``packages.find`` leaves it out): ``tests/`` and ``bench/`` both import it from the repository
root (pytest puts the root on ``sys.path`` through ``tests/__init__.py``; ``python -m bench.x``
runs from it). It lives apart from both because ``bench`` is a layer of the import contract and
must not import ``tests``, while the tests import ``bench``.
"""
