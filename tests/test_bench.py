"""rlt.bench: the FLOP ratios issue 7 targets (counted, not timed) and a smoke run of the CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from rlt import bench, bench_stream
from rlt.models import RLTConfig, build_model, native
from rlt.models.native import native_available, token_loop

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def step_flops(model: torch.nn.Module, length: int) -> int:
    """FLOPs of one forward + backward on (2, length) tokens, as FlopCounterMode counts them."""
    tokens = torch.randint(1, 140, (2, length + 1), generator=torch.Generator().manual_seed(0))
    with FlopCounterMode(display=False) as counter:
        logits = model(tokens[:, :-1])
        F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).backward()
    return counter.get_total_flops()


@pytest.fixture(scope="module")
def models() -> dict[str, torch.nn.Module]:
    # head dim 64: the fused recurrence uses its BLAS attention kernels, so FlopCounterMode
    # (which counts matmul-family ops only) sees the attention of every variant
    # and the report's split 4+4, whose encoder and decoder dilute the feedback path's 3d^2
    sizes = dict(d_model=256, n_heads=4, d_ff=682, n_enc=4, n_dec=4)
    torch.manual_seed(0)
    rlt1 = build_model(RLTConfig(feedback_interval=1, **sizes))
    rlt0 = build_model(RLTConfig(feedback_interval=None, **sizes))
    return {"rlt1": rlt1, "rlt0": rlt0}


def test_rlt1_does_about_the_arithmetic_of_rlt0(models) -> None:
    ratio = step_flops(models["rlt1"], 24) / step_flops(models["rlt0"], 24)
    assert 1.0 < ratio <= 1.05


def test_rlt1_flops_are_linear_in_length(models) -> None:
    """No recomputation over the prefix: doubling T at most doubles the work (plus the
    memory attention's quadratic term, small at this width)."""
    ratio = step_flops(models["rlt1"], 40) / step_flops(models["rlt1"], 20)
    assert ratio <= 2.1


def test_fused_and_plain_paths_count_the_same_matmuls(models) -> None:
    model = models["rlt1"]
    fused = step_flops(model, 12)
    model.config.fused = False
    try:
        plain = step_flops(model, 12)
    finally:
        model.config.fused = True
    assert abs(fused - plain) / plain < 0.02


def test_bench_cli_smoke(tmp_path, capsys) -> None:
    out = tmp_path / "bench.json"
    argv = "--preset small --d-model 32 --n-heads 4 --d-ff 48 --split 1+1 --batch 2 --length 8"
    argv += f" --repeats 1 --warmup 1 --threads 1 --mode both --positions 4,8 --json {out}"
    result = bench.main(argv.split())
    printed = capsys.readouterr().out
    assert "ratios:" in printed and "decode@8 ms" in printed
    saved = json.loads(out.read_text())
    for key in (
        "rlt1/rlt0",
        "rlt2/rlt0",
        "rlt1/transformer",
        "flops_rlt1/rlt0",
        "paired:rlt1/rlt0",
    ):
        assert key in saved["ratios"] and saved["ratios"][key] > 0
    assert set(result["train"]["rows"]) == {"transformer", "rlt0", "rlt1", "rlt2"}
    rows = saved["stream"]["rows"]
    # the SWA part of the state does not grow with the position
    assert (
        rows["rlt1"]["recurrent_state_bytes_per_seq"]["4"]
        == rows["rlt1"]["recurrent_state_bytes_per_seq"]["8"]
    )


@pytest.mark.parametrize(
    "extra, message",
    [
        ("--device foo", "--device 'foo': use cpu or cuda"),
        ("--d-ff 0", "--d-ff must be >= 1, got 0"),
        ("--json /nonexistent-dir/out.json", "/nonexistent-dir is not a directory"),
        ("--json /", "that is a directory"),
    ],
)
def test_a_bad_device_width_or_result_path_is_refused_before_measuring(
    extra, message, capsys
) -> None:
    """These were a traceback (the device, d_ff, after a few seconds), or for --json one after
    the whole measurement, whose numbers were then lost."""
    with pytest.raises(SystemExit) as exc:
        bench.parse_args(f"--preset small {extra}".split())
    assert exc.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, message",
    [
        ("--compile --plain", "exclude each other"),
        ("--compile --warmup 0", "--warmup >= 1"),
        ("--native --compile", "drop --compile / --plain"),
        ("--native --plain", "drop --compile / --plain"),
    ],
)
def test_bench_compile_refuses_what_it_cannot_measure(extra, message, capsys) -> None:
    with pytest.raises(SystemExit):
        bench.parse_args(f"--preset small {extra}".split())
    assert message in capsys.readouterr().err


def test_bench_stack_times_k_seeds_against_k_single_steps(tmp_path, capsys) -> None:
    """--stack K: per variant one seed's step, one at K times the batch and, where the model
    stacks, the K seeds stacked; a model that does not stack says why."""
    argv = "--preset small --d-model 32 --n-heads 4 --d-ff 48 --split 1+1 --batch 2 --length 8"
    argv += " --repeats 1 --warmup 0 --threads 1 --no-memory --variants transformer,rlt1"
    result = bench.main([*argv.split(), "--stack", "3", "--json", str(tmp_path / "s.json")])
    rows = json.loads((tmp_path / "s.json").read_text())["stack"]["rows"]
    assert rows.keys() == {"transformer", "rlt1"} and result["stack"]["k"] == 3
    tf, rlt1 = rows["transformer"], rows["rlt1"]
    assert tf["why_not"] is None and tf["stack_s"] > 0 and tf["batch_s"] > 0
    assert tf["stack_vs_k_singles"] == pytest.approx(tf["stack_s"] / (3 * tf["single_s"]))
    assert "fused token loop" in rlt1["why_not"] and "stack_s" not in rlt1
    assert "does not stack: its recurrence" in capsys.readouterr().out


@pytest.mark.parametrize(
    "extra, says",
    [
        ("--stack 0", "--stack K needs"),
        ("--stack 2 --bf16", "--stack K needs"),
        ("--stack 2 --compile", "--stack K needs"),
        ("--stack 2 --mode both", "drop --mode stream/both"),
    ],
)
def test_bench_stack_refuses_what_it_does_not_time(extra, says, capsys) -> None:
    with pytest.raises(SystemExit):
        bench.parse_args(f"--preset small {extra}".split())
    assert says in capsys.readouterr().err


@pytest.mark.parametrize("before", [None, "/somewhere/the/user/set"])
def test_the_empty_compile_cache_is_removed_and_the_setting_restored(before, monkeypatch):
    """--compile times a first compile in an empty inductor cache: the directory exists while
    the bench runs, and afterwards it is gone and TORCHINDUCTOR_CACHE_DIR is what it was (a
    test process or a notebook calling bench.main goes on with its own cache)."""
    key = "TORCHINDUCTOR_CACHE_DIR"
    if before is None:
        monkeypatch.delenv(key, raising=False)
    else:
        monkeypatch.setenv(key, before)
    with bench.empty_inductor_cache(True):
        inside = Path(os.environ[key])
        assert inside.is_dir() and not any(inside.iterdir()) and str(inside) != before
        (inside / "a-compiled-kernel.so").write_text("")
    assert not inside.exists()
    assert os.environ.get(key) == before
    with bench.empty_inductor_cache(False):  # --warm-cache, or no --compile: left alone
        assert os.environ.get(key) == before


@pytest.mark.slow
def test_bench_compile_reports_compile_time_and_the_same_keys(tmp_path) -> None:
    """--compile: the JSON of an eager run, plus each variant's compile time. Length 4: RLT-1's
    compiled step unrolls its token loop, and its compile time grows with the length (on a
    2-core CI machine about 30 s at 4 tokens, 90 s at 8)."""
    argv = "--preset small --d-model 32 --n-heads 4 --d-ff 48 --split 1+1 --batch 2 --length 4"
    argv += " --repeats 1 --warmup 1 --threads 1 --mode train --no-memory --variants rlt0,rlt1"
    eager = bench.main(argv.split())
    compiled = bench.main([*argv.split(), "--compile", "--json", str(tmp_path / "c.json")])
    assert compiled["ratios"].keys() == eager["ratios"].keys()
    rows = json.loads((tmp_path / "c.json").read_text())["train"]["rows"]
    assert set(rows) == {"rlt0", "rlt1"}
    assert all(row["compile_s"] > 0 and row["wall_s"]["median"] > 0 for row in rows.values())
    assert eager["train"]["rows"]["rlt1"]["compile_s"] is None


@pytest.mark.skipif(not native_available()[0], reason="no C++ token loop here")
def test_bench_native_times_the_cpp_loop_with_the_same_keys(tmp_path, monkeypatch) -> None:
    """--native: RLT-1 through the C++ loop (the library's calls counted), the eager JSON keys."""
    argv = "--preset small --d-model 32 --n-heads 4 --d-ff 48 --split 1+1 --batch 2 --length 8"
    argv += " --repeats 1 --warmup 0 --threads 1 --mode train --no-memory --variants rlt0,rlt1"
    eager = bench.main(argv.split())
    calls = []
    library = token_loop()

    class Spy:
        def __getattr__(self, name):
            calls.append(name)
            return getattr(library, name)

    monkeypatch.setattr(native, "token_loop", lambda: Spy())
    result = bench.main([*argv.split(), "--native"])
    assert result["ratios"].keys() == eager["ratios"].keys()
    assert result["train"]["native_build_s"] >= 0 and eager["train"]["native_build_s"] is None
    assert "forward_loop" in calls and "backward_loop" in calls


def test_stream_bench_measures_every_family_and_splits_the_state_bytes(tmp_path) -> None:
    """Issue 39: every family in stream mode; the growing part of the state is linear in the
    position (RLT encoder caches and memory, the Transformer's KV caches) and the bounded part
    constant (RLT s_t and windows, LSTM (h, c), DeltaNet's state), checked at positions 4 and 8."""
    out = tmp_path / "stream.json"
    argv = "--preset small --d-model 32 --n-heads 4 --d-ff 48 --split 1+1 --threads 1"
    argv += " --repeats 1 --mode stream --positions 4,8 --stream-batch 2 --bandwidth-mb 64"
    argv += f" --variants rlt1,rlt2,rlt0,transformer,lstm,deltanet --json {out}"
    bench.main(argv.split())
    saved = json.loads(out.read_text())
    rows = saved["stream"]["rows"]
    assert set(rows) == {"rlt1", "rlt2", "rlt0", "transformer", "lstm", "deltanet"}
    assert saved["machine"]["cpu_model"]
    for name, r in rows.items():
        grow, bound = r["growing_state_bytes_per_seq"], r["recurrent_state_bytes_per_seq"]
        assert grow["8"] == 2 * grow["4"], name  # linear (zero for the recurrent baselines)
        assert bound["8"] == bound["4"], name  # constant
        assert grow["8"] + bound["8"] == r["state_bytes_per_seq"]["8"], name
    assert rows["lstm"]["growing_state_bytes_per_seq"]["8"] == 0
    for name, r in rows.items():  # the size check's count of the growing keys and values
        layers = bench_stream.growing_layers(name, 1, 1)
        assert r["growing_state_bytes_per_seq"]["8"] == 8 * layers * 2 * 32 * 4, name
    assert rows["transformer"]["recurrent_state_bytes_per_seq"]["8"] == 0
    assert rows["rlt1"]["growing_state_bytes_per_seq"]["8"] > 0
    # the weights a token's sequential step reads: an RLT's decoder (one of its two blocks
    # here, so about half), every weight of the other families; beside the read bandwidth
    rlt1, tf = rows["rlt1"]["weight_bytes"], rows["transformer"]["weight_bytes"]
    assert 0.2 * rlt1["all"] < rlt1["per_token_step"] < 0.6 * rlt1["all"]
    assert tf["per_token_step"] == tf["all"] and saved["stream"]["read_gb_s_one_thread"] > 0
    bound = saved["stream"]["prefill_s_per_token_vs_weight_read"]["rlt1"]["weight_read_bound"]
    gb_s = saved["stream"]["read_gb_s_one_thread"]
    assert bound == pytest.approx(rlt1["per_token_step"] / 2 / (gb_s * 1e9))


@pytest.mark.parametrize(
    "argv, message",
    [
        ("--positions=abc", "--positions: 'abc' is not a whole number"),
        ("--positions 16,,32", "--positions: '16,,32' has an empty item"),
        ("--positions 1e3", "--positions: '1e3' is not a whole number"),
        ("--positions 0,8", "--positions: 0 is not >= 1"),
        ("--bandwidth-mb 0", "--bandwidth-mb: 0 is not > 0"),
        ("--bandwidth-mb -5", "--bandwidth-mb: -5 is not > 0"),
        ("--bandwidth-mb nan", "--bandwidth-mb: 'nan' is not a finite number"),
        ("--stream-batch 0", "--stream-batch must be >= 1"),
    ],
)
def test_stream_arguments_are_refused_in_one_line_before_any_work(argv, message, capsys) -> None:
    """Issue 55: these ended in a ValueError, ZeroDivisionError or negative-dimension traceback
    after the models were built (or, 16,,32, at the first decode)."""
    with pytest.raises(SystemExit) as exc:
        bench.parse_args(["--preset", "small", "--mode", "stream", *argv.split()])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and err[-1].startswith("python -m rlt.bench: error: ")
    assert message in err[-1], err[-1]


@pytest.mark.parametrize(
    "argv, lower",
    [
        ("--positions 1000000000", "--positions"),
        ("--positions 4,16 --stream-batch 1000000000", "--stream-batch"),
        ("--bandwidth-mb 1e12", "--bandwidth-mb"),
    ],
)
def test_stream_sizes_beyond_the_memory_are_refused_before_any_work(argv, lower, capsys) -> None:
    """Issue 55: a size the machine cannot hold ended in an allocator traceback (8 GB, 136 GB
    asked); refused in one line giving the estimate, the memory available and what to lower."""
    with pytest.raises(SystemExit) as exc:
        bench.parse_args(["--preset", "small", "--mode", "stream", *argv.split()])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert exc.value.code == 2 and "GB available" in err and f"lower {lower}" in err, err
    assert bench.parse_args(["--preset", "small", "--mode", "train", *argv.split()])  # unused


def test_the_stream_size_check_is_skipped_where_memory_cannot_be_read(monkeypatch) -> None:
    monkeypatch.setattr(bench_stream, "available_bytes", lambda device="cpu": None)
    args = bench.parse_args("--preset small --mode stream --positions 1000000000".split())
    assert args.positions == [1000000000]


def test_train_mode_times_the_recurrent_baselines_with_a_runs_ffn_width(tmp_path) -> None:
    """Issue 57: the LSTM, DeltaNet, DeltaProduct and PD-SSM are timed beside the report's
    models, each built as a run builds it (FFN narrowed to the Transformer's block parameters),
    and an unknown name is refused naming every choice."""
    from rlt.models import DeltaProductConfig

    argv = "--preset small --d-model 32 --n-heads 4 --d-ff 48 --split 1+1 --batch 2 --length 8"
    argv += " --repeats 1 --warmup 1 --threads 1 --no-memory --mode train"
    argv += " --variants transformer,lstm,deltanet,deltaproduct,pdssm"
    result = bench.main(argv.split())
    rows = result["train"]["rows"]
    assert set(rows) == {"transformer", "lstm", "deltanet", "deltaproduct", "pdssm"}
    assert all(r["wall_s"]["median"] > 0 for r in rows.values())
    models = bench.build_variants(bench.parse_args(argv.split()))
    fields = dict(d_model=32, n_heads=4, vocab_size=140, n_layers=2)
    d_ff = DeltaProductConfig.matched_d_ff(48, fields)
    assert d_ff != 48 and models["deltaproduct"].config.d_ff == d_ff


def test_an_unknown_variant_or_none_is_refused_naming_every_choice(capsys) -> None:
    with pytest.raises(SystemExit):
        bench.parse_args("--preset small --mode train --variants lstm,gru".split())
    assert "unknown ['gru']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.parse_args(["--preset", "small", "--mode", "stream", "--variants", ","])
    assert "--variants names none; choose from transformer," in capsys.readouterr().err


def test_paired_ratio_takes_each_round_against_its_own_round() -> None:
    # a host that slows down by half during the run: every round, rlt1 takes 1.1x rlt0
    rlt0 = [4.0, 4.0, 6.0, 6.0, 6.0]
    rlt1 = [4.4, 4.4, 6.6, 6.6, 6.6]
    assert bench.paired_ratio(rlt1, rlt0) == pytest.approx(1.1)
    # per-round ratios 1.5, 2.0, 1.0: median 1.5, where the medians' ratio is 3 / 3 = 1.0
    assert bench.paired_ratio([9.0, 2.0, 3.0], [6.0, 1.0, 3.0]) == pytest.approx(1.5)
    rows = {
        name: {
            "wall_s": bench.summary(r),
            "cpu_s": bench.summary(r),
            "rounds_s": r,
            "flops": 1,
            "peak_bytes": None,
        }
        for name, r in (("rlt0", rlt0), ("rlt1", rlt1))
    }
    assert bench.ratios(rows)["paired:rlt1/rlt0"] == pytest.approx(1.1)
    with pytest.raises(ValueError):  # rounds of two lengths cannot be paired
        bench.paired_ratio([1.0, 2.0], [1.0])


def test_auto_warmup_waits_for_every_variant_to_stop_faulting() -> None:
    steady, growing = {"minor_faults": 3}, {"minor_faults": bench.SETTLED_FAULTS + 1}
    assert bench.heap_settled({"rlt0": [growing, steady], "rlt1": [steady]})
    assert not bench.heap_settled({"rlt0": [steady], "rlt1": [steady, growing]})
    assert not bench.heap_settled({"rlt0": [], "rlt1": [steady]})


def test_auto_warmup_is_recorded_and_a_bad_value_is_refused(tmp_path, capsys) -> None:
    out = tmp_path / "bench.json"
    argv = "--preset small --d-model 32 --n-heads 4 --d-ff 48 --split 1+1 --batch 2 --length 8"
    argv += f" --repeats 2 --threads 1 --mode train --no-memory --variants rlt0,rlt1 --json {out}"
    bench.main(argv.split())
    for row in json.loads(out.read_text())["train"]["rows"].values():
        assert 1 <= len(row["warmup"]) <= bench.WARMUP_MAX
        assert len(row["warmup"]) == bench.WARMUP_MAX or bench.heap_settled({"x": row["warmup"]})
    with pytest.raises(SystemExit):
        bench.parse_args(["--warmup", "soon"])
    assert "a number of rounds or auto" in capsys.readouterr().err
