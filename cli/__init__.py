"""The ``ragline`` command: one module per command group, each with ``register(subparsers)``.

Handlers import heavy packages lazily, so ``ragline db status`` loads neither torch nor Ray.
"""
