"""Edge helpers every reconciler process shares, the service and the offline tools alike:
structured logging (``logging``), the NATS options of the config file (``natsopts``), where a
command finds the log (``logsource``) and a progress bar for long reads (``progress``)."""
