"""What this machine must provide for a run's trainer settings (CUDA for a GPU accelerator, a
compiler for trainer.compile=on, the C++ token loop for trainer.native=on), checked before
anything is written, and the one-line errors that name the fix."""

from __future__ import annotations

from omegaconf import DictConfig

from rlt.training.schema import ConfigError

# trainer.compile: the compiled chunk step of RLT-1/RLT-2 (rlt.training.trainer_setup.resolve_compile)
COMPILE_MODES = ("auto", "on", "off")


def no_compiler(why: str) -> ConfigError:
    """The error for trainer.compile=on where torch.compile cannot run, with the fix."""
    return ConfigError(
        f"trainer.compile=on, but torch.compile cannot run here: {why}. Install one, or use "
        "trainer.compile=auto (falls back to the eager recurrence) or off"
    )


# trainer.native: the C++ token loops of RLT-1/RLT-2 (rlt.training.trainer_setup.resolve_native)
NATIVE_MODES = ("auto", "on", "off")


def no_native(why: str) -> ConfigError:
    """The error for trainer.native=on where the C++ token loop cannot be built, with the fix."""
    return ConfigError(
        f"trainer.native=on, but the C++ token loop cannot be built here: {why}. Fix that, or "
        "use trainer.native=auto (falls back to the Python loop) or off"
    )


def check_environment(cfg: DictConfig, *, cuda: bool = True) -> None:
    """What this machine must provide for the trainer settings: CUDA for a GPU accelerator
    (unless ``cuda=False``: the jobs run elsewhere), a positive thread count. Checked before
    anything is written, so a wrong setting never becomes a failed run whose configuration
    then blocks the corrected command."""
    import torch

    trainer = cfg.trainer
    accelerator = str(trainer.accelerator)
    if cuda and accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"trainer.accelerator={accelerator} needs CUDA, which this machine does not have "
            f"(torch {torch.__version__}); use trainer=cpu"
        )
    if accelerator not in ("cpu", "gpu", "cuda", "auto", "mps"):
        raise ConfigError(f"trainer.accelerator={accelerator!r}: use cpu or gpu (trainer=cpu|gpu)")
    threads = trainer.threads
    if threads not in (None, "auto") and (
        isinstance(threads, bool) or not isinstance(threads, int) or threads < 1
    ):
        raise ConfigError(f"trainer.threads must be auto or an integer >= 1, got {threads!r}")
    compile_mode = trainer.get("compile", "auto")
    if compile_mode not in COMPILE_MODES and not isinstance(compile_mode, bool):
        raise ConfigError(f"trainer.compile must be auto, on or off, got {compile_mode!r}")
    if cuda and compile_mode in ("on", True):  # the jobs run here: the compiler must be here
        from rlt.models.compiled import compiler_available

        ok, why = compiler_available("cuda" if accelerator in ("gpu", "cuda") else "cpu")
        if not ok:
            raise no_compiler(why)
    native_mode = trainer.get("native", "auto")
    if native_mode not in NATIVE_MODES and not isinstance(native_mode, bool):
        raise ConfigError(f"trainer.native must be auto, on or off, got {native_mode!r}")
    if cuda and native_mode in ("on", True):
        from rlt.models.native import native_available

        ok, why = native_available()
        if not ok:
            raise no_native(why)
