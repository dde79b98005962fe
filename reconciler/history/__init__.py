"""The log read back into the core's state: ``replay`` folds it (verifying or explaining each
decision batch), ``rebuild`` starts from a snapshot and repairs a batch a crashed leader left
short. The leader loop rebuilds with it at the start of every term; the offline tools replay."""
