"""NVML series and GPM parsers on real 2x H200 readings."""

from __future__ import annotations

from pathlib import Path

import pytest

from slime_hangdoctor.errors import ParseError
from slime_hangdoctor.facts import GpuProcessUtil, GpuSeries
from slime_hangdoctor.parsers.nvml import parse_gpm, parse_nvml_series
from tests.fixtures import transforms as tf

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
NCCL = REAL / "gpu-2xh200-nccl-broadcast-hang"
RAY = REAL / "gpu-2xh200-ray-nccl-hang"


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _series(name: str) -> GpuSeries:
    return parse_nvml_series(_read(NCCL / name))


def _gpu_values(series: GpuSeries, index: int, attr: str) -> list[object]:
    return [getattr(next(g for g in s.gpus if g.index == index), attr) for s in series.samples]


# --------------------------------------------------------------------------- series


def test_run3_hang_stuck_gpu_is_100_0_with_flat_nvlink() -> None:
    series = _series("run3_hang.nvml.json")
    assert series.driver == "580.159.04"
    assert len(series.samples) == 20
    assert series.samples[0].t == 0.0 and series.samples[-1].t == pytest.approx(11.21)
    assert set(_gpu_values(series, 0, "util_gpu")) == {100}
    assert set(_gpu_values(series, 0, "util_mem")) == {0}
    assert set(_gpu_values(series, 1, "util_gpu")) == {0}
    for idx in (0, 1):
        assert len(set(_gpu_values(series, idx, "nvlink_tx"))) == 1  # flat counters
        assert len(set(_gpu_values(series, idx, "nvlink_rx"))) == 1
    first = series.samples[0].gpus[0]
    assert first.nvlink_tx == 64040 and first.nvlink_rx == 57806
    assert first.processes == ((571, 2598371328),)
    assert first.process_util == (GpuProcessUtil(pid=571, sm_util=100, mem_util=0),)
    assert first.power_w == pytest.approx(127.493)
    assert first.sm_mhz == 1980 and first.pcie_tx_kbs == 1343 and first.pcie_rx_kbs == 1001
    peer = series.samples[0].gpus[1]
    assert peer.process_util == (GpuProcessUtil(pid=572, sm_util=0, mem_util=0),)


def test_run1_busy_nvlink_rises_and_memory_is_busy() -> None:
    series = _series("run1_busy.json")
    tx = _gpu_values(series, 0, "nvlink_tx")
    assert tx[-1] > tx[0]  # type: ignore[operator]
    assert min(_gpu_values(series, 0, "util_mem")) >= 30  # type: ignore[type-var]
    assert min(_gpu_values(series, 0, "power_w")) > 250  # type: ignore[type-var]


def test_run1_idle_process_util_error_string_becomes_empty() -> None:
    series = _series("run1_idle.json")
    gpu = series.samples[0].gpus[0]
    assert gpu.process_util == () and gpu.processes == ()
    assert (gpu.util_gpu, gpu.util_mem, gpu.sm_mhz) == (0, 0, 345)


def test_run3_matmul_is_a_busy_gpu() -> None:
    gpu = _series("run3_matmul.nvml.json").samples[0].gpus[0]
    assert gpu.power_w is not None and gpu.power_w > 500
    assert (gpu.util_gpu, gpu.util_mem) == (99, 30)


def test_ray_one_shot_form_is_one_sample() -> None:
    series = parse_nvml_series(_read(RAY / "hang" / "nvml.json"))
    (sample,) = series.samples
    assert sample.t == 0.0 and series.driver is None
    gpu0, gpu1 = sample.gpus
    assert (gpu0.util_gpu, gpu0.util_mem, gpu0.processes) == (100, 0, ((3445, 1793064960),))
    assert (gpu1.util_gpu, gpu1.processes[0][0]) == (0, 3446)
    assert gpu0.nvlink_tx is None and gpu0.sm_mhz is None and gpu0.process_util == ()
    busy = parse_nvml_series(_read(RAY / "busy" / "nvml.json")).samples[0].gpus
    assert [(g.util_gpu, g.util_mem) for g in busy] == [(89, 26), (92, 29)]


@pytest.mark.parametrize("field", ["power_w", "sm_mhz", "pcie_tx_kbs", "pcie_rx_kbs"])
def test_field_error_string_becomes_none(field: str) -> None:
    text = tf.nvml_field_error(_read(NCCL / "run3_hang.nvml.json"), field)
    gpu = parse_nvml_series(text).samples[3].gpus[0]
    assert getattr(gpu, field) is None
    assert gpu.util_gpu == 100


def test_util_and_nvlink_errors_become_none() -> None:
    text = _read(NCCL / "run3_hang.nvml.json")
    gpu = parse_nvml_series(tf.nvml_field_error(text, "util")).samples[0].gpus[0]
    assert (gpu.util_gpu, gpu.util_mem) == (None, None)
    gpu = parse_nvml_series(tf.nvml_field_error(text, "nvlink")).samples[0].gpus[0]
    assert (gpu.nvlink_tx, gpu.nvlink_rx) == (None, None)
    gpu = parse_nvml_series(tf.nvml_field_error(text, "procs")).samples[0].gpus[0]
    assert gpu.processes == ()


def test_nvlink_counter_with_failed_return_code_is_none() -> None:
    text = tf.set_json_path(
        _read(NCCL / "run3_hang.nvml.json"), ("samples", 0, "gpus", 0, "nvlink", 0, 0), 3
    )
    gpu = parse_nvml_series(text).samples[0].gpus[0]
    assert gpu.nvlink_tx is None and gpu.nvlink_rx == 57806


@pytest.mark.parametrize(
    "key", ["power_w", "sm_mhz", "nvlink", "proc_util", "procs", "util", "driver"]
)
def test_dropped_fields_become_none(key: str) -> None:
    series = parse_nvml_series(tf.drop_json_key(_read(NCCL / "run3_hang.nvml.json"), key))
    assert len(series.samples) == 20
    gpu = series.samples[0].gpus[0]
    if key == "driver":
        assert series.driver is None
    elif key == "util":
        assert gpu.util_gpu is None and gpu.util_mem is None
    elif key == "nvlink":
        assert gpu.nvlink_tx is None
    elif key in ("proc_util", "procs"):
        assert (gpu.process_util if key == "proc_util" else gpu.processes) == ()
    else:
        assert getattr(gpu, key) is None


def test_sample_times_are_relative_to_the_first() -> None:
    text = _read(NCCL / "run3_hang.nvml.json")
    for i in range(3):
        text = tf.set_json_path(text, ("samples", i, "t"), 1000.0 + i * 0.5)
    series = parse_nvml_series(text)
    assert [s.t for s in series.samples[:3]] == [0.0, 0.5, 1.0]


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda t: "", "empty"),
        (lambda t: "garbage {", "not JSON"),
        (lambda t: tf.truncate_at(t, 5000), "not JSON"),
        (lambda t: "[1, 2]", "not an object"),
        (lambda t: tf.set_json_path(t, ("samples",), {"a": 1}), "'samples' is not a list"),
        (lambda t: tf.set_json_path(t, ("samples",), []), "no samples"),
        (lambda t: tf.set_json_path(t, ("samples", 2), "x"), "sample 2 is str"),
        (lambda t: tf.set_json_path(t, ("samples", 1, "t"), None), "no numeric time"),
        (lambda t: tf.set_json_path(t, ("samples", 0, "gpus"), None), "no 'gpus' list"),
        (lambda t: tf.set_json_path(t, ("samples", 0, "gpus", 0), [1]), "not an object"),
        (lambda t: tf.set_json_path(t, ("samples", 0, "gpus", 0, "util"), {"g": 1}), "util"),
        (lambda t: tf.set_json_path(t, ("samples", 0, "gpus", 0, "util"), [1]), "util"),
        (lambda t: tf.set_json_path(t, ("samples", 0, "gpus", 0, "power_w"), True), "power_w"),
        (lambda t: tf.set_json_path(t, ("samples", 0, "gpus", 0, "procs", 0), 5), "procs"),
        (lambda t: tf.set_json_path(t, ("samples", 0, "gpus", 0, "i"), "0"), "GPU index"),
        (lambda t: tf.drop_json_key(t, "samples"), "neither"),
    ],
)
def test_bad_series_raises_parse_error(change: object, match: str) -> None:
    text = _read(NCCL / "run3_hang.nvml.json")
    with pytest.raises(ParseError, match=match):
        parse_nvml_series(change(text))  # type: ignore[operator]


# --------------------------------------------------------------------------- GPM


def test_gpm_stuck_vs_busy_vs_matmul() -> None:
    hang = parse_gpm(_read(NCCL / "run2_gpm_hang.json"))
    assert [g.index for g in hang] == [0, 1] and all(g.supported for g in hang)
    stuck = hang[0].metrics
    assert stuck["SM_UTIL"] == pytest.approx(18.18)
    assert stuck["DRAM_BW_UTIL"] == 0.0 and stuck["NVLINK_TOTAL_TX"] == 0.0
    assert stuck["GRAPHICS_UTIL"] == 100.0
    busy = parse_gpm(_read(NCCL / "run2_gpm_busy.json"))[0].metrics
    assert busy["DRAM_BW_UTIL"] == pytest.approx(26.65)
    assert busy["NVLINK_TOTAL_TX"] == pytest.approx(313074.1)
    matmul = parse_gpm(_read(NCCL / "run3_matmul.gpm.json"))[0].metrics
    assert matmul["ANY_TENSOR_UTIL"] == pytest.approx(88.95) and matmul["SM_UTIL"] > 90
    idle = parse_gpm(_read(NCCL / "run2_gpm_idle.json"))
    assert all(v == 0.0 for g in idle for v in g.metrics.values())


def test_gpm_variants() -> None:
    text = _read(NCCL / "run3_hang.gpm.json")
    unsupported = parse_gpm(tf.set_json_path(text, (0, "gpm_supported"), 0))
    assert unsupported[0].supported is False and unsupported[1].supported is True
    errored = parse_gpm(tf.set_json_path(text, (0, "gpm"), "ERR NVMLError_NotSupported: x"))
    assert errored[0].metrics == {}
    one_failed = parse_gpm(tf.set_json_path(text, (0, "gpm", "SM_UTIL"), "ERR timeout"))
    assert "SM_UTIL" not in one_failed[0].metrics and "DRAM_BW_UTIL" in one_failed[0].metrics
    wrapped = parse_gpm('{"gpus": ' + text + "}")
    assert wrapped == parse_gpm(text)
    no_index = parse_gpm(tf.drop_json_key(text, "i"))
    assert [g.index for g in no_index] == [0, 1]


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda t: "", "empty"),
        (lambda t: tf.truncate_at(t, 100), "not JSON"),
        (lambda t: '{"error": "NVMLError_LibraryNotFound"}', "not a list"),
        (lambda t: tf.set_json_path(t, (0,), "gpu"), "not an object"),
        (lambda t: tf.set_json_path(t, (0, "gpm"), [1, 2]), "not an object"),
        (lambda t: tf.set_json_path(t, (0, "gpm", "SM_UTIL"), [1]), "SM_UTIL"),
        (lambda t: tf.set_json_path(t, (0, "gpm_supported"), 1.5), "gpm_supported"),
    ],
)
def test_bad_gpm_raises_parse_error(change: object, match: str) -> None:
    text = _read(NCCL / "run2_gpm_busy.json")
    with pytest.raises(ParseError, match=match):
        parse_gpm(change(text))  # type: ignore[operator]


def test_out_of_range_numbers_are_a_parse_error() -> None:
    text = _read(NCCL / "run3_hang.nvml.json")
    with pytest.raises(ParseError, match="out of range"):
        parse_nvml_series(tf.set_json_path(text, ("samples", 0, "gpus", 0, "power_w"), 10**400))
    with pytest.raises(ParseError, match="out of range"):
        parse_nvml_series(tf.set_json_path(text, ("samples", 1, "t"), 10**400))
    huge = tf.insert_digits(text.encode(), text.index('"sm_mhz": ') + 10)
    with pytest.raises(ParseError, match="usable JSON"):
        parse_nvml_series(tf.decode_like_loader(huge))
