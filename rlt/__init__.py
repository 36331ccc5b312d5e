"""rlt: run, check and extend the experiments of the Recurrent Looped Transformer report."""

__version__ = "0.1.0"
