"""The ``tgb`` command line: entry point ``torch_tgb.cli.main:main``, one module per subcommand.

Nothing is imported here, so that the submodule ``torch_tgb.cli.main`` is not
shadowed by its function of the same name.
"""
