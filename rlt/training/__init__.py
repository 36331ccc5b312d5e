"""Training glue: the LightningModules, callbacks, run directories and results on disk."""
