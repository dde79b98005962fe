"""Edge helpers every reconciler process shares, the service and the offline tools alike:
structured logging (``logging``), the NATS options of the config file (``natsopts``), where a
command finds the log (``logsource``), a progress bar for long reads (``progress``) and the
garbage collector's policy for a process holding the state (``gcpolicy``)."""
