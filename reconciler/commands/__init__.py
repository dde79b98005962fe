"""One module per ``kdispatch`` subcommand (see ``reconciler.cli``)."""
