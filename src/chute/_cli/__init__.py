"""The pieces of the ``chute`` command: one module per subcommand, the readers
of each input format, and the record format that ``convert`` writes and
``inspect`` reads back (see ``chute.cli`` for the user's view)."""
