"""Trace readers on small slices of the real corpus files and on hand-written CSV."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from eventlog.kube.quantity import QuantityError, to_units
from reconciler.simulate.readers import guess_format, load_trace
from reconciler.simulate.readers.alibaba import GPU_RESOURCE as ALI_GPU
from reconciler.simulate.readers.alibaba import MODEL_LABEL
from reconciler.simulate.trace import MIB, TraceError
from tests.paths import TRACES

CORPUS = TRACES
ALIBABA = CORPUS / "alibaba-gpu-v2023"
TIRESIAS = CORPUS / "tiresias-sample" / "60_job.csv"


def _slice(src: Path, dst: Path, lines: int) -> Path:
    with src.open() as fh:
        dst.write_text("".join(fh.readline() for _ in range(lines)))
    return dst


@pytest.fixture
def alibaba_slice(tmp_path: Path) -> Path:
    """The first 40 tasks of the default pod list and of the gpuspec33 list, with the node list."""
    _slice(ALIBABA / "openb_pod_list_default.csv", tmp_path / "openb_pod_list_default.csv", 41)
    shutil.copy(ALIBABA / "openb_node_list_gpu_node.csv", tmp_path)
    return tmp_path


def test_alibaba_clusters_are_nodes_grouped_by_gpu_model(alibaba_slice: Path) -> None:
    trace = load_trace(alibaba_slice)
    names = [c.name for c in trace.clusters]
    assert names == sorted(names)
    assert "alibaba-g2" in names and "alibaba-cpu" not in names  # gpu_node list: no CPU-only nodes
    t4 = next(c for c in trace.clusters if c.name == "alibaba-t4")
    assert t4.labels[MODEL_LABEL] == "T4"
    # Summed from the node list: 6,212 GPUs in all (SOURCES.md), in milli-GPUs.
    assert trace.total_capacity(ALI_GPU) == 6212 * 1000


def test_alibaba_tasks_become_one_pod_jobs(alibaba_slice: Path) -> None:
    trace = load_trace(alibaba_slice)
    assert len(trace.jobs) == 40
    first = next(j for j in trace.jobs if j.name == "openb-pod-0001")
    # openb-pod-0001,6000,12288,1,460,,LS,Running,427061,12902960,427061
    assert first.submit_ms == 427_061_000
    assert first.runtime_ms == (12_902_960 - 427_061) * 1000
    assert first.pod_sets[0].count == 1
    assert first.pod_sets[0].requests == {"cpu": 6000, "memory": 12288 * MIB, ALI_GPU: 460}
    assert (first.priority_class, first.priority) == ("ls", 1000)
    assert first.delete_ms is None


def test_alibaba_pending_task_is_deleted_by_its_user(tmp_path: Path) -> None:
    rows = (ALIBABA / "openb_pod_list_default.csv").read_text().splitlines()
    pending = [r for r in rows if ",Pending," in r][:2]
    (tmp_path / "openb_pod_list_default.csv").write_text("\n".join([rows[0], *pending]) + "\n")
    shutil.copy(ALIBABA / "openb_node_list_all_node.csv", tmp_path)
    trace = load_trace(tmp_path)
    assert "alibaba-cpu" in [c.name for c in trace.clusters]
    cols = pending[0].split(",")
    job = next(j for j in trace.jobs if j.name == cols[0])
    created, deleted = int(cols[8]), int(cols[9])
    assert job.delete_ms == deleted * 1000
    assert job.runtime_ms == (deleted - created) * 1000
    assert job.priority_class == cols[6].lower()


def test_alibaba_gpu_spec_becomes_required_affinity(tmp_path: Path) -> None:
    rows = (ALIBABA / "openb_pod_list_gpuspec33.csv").read_text().splitlines()
    picked = [rows[0], *[r for r in rows[1:] if "V100M16|V100M32" in r][:1], rows[1]]
    pods = tmp_path / "openb_pod_list_gpuspec33.csv"
    pods.write_text("\n".join(picked) + "\n")
    shutil.copy(ALIBABA / "openb_node_list_gpu_node.csv", tmp_path)
    trace = load_trace(pods)
    constrained = next(j for j in trace.jobs if j.placement.cluster_affinity.required)
    expr = constrained.placement.cluster_affinity.required[0].match_expressions[0]
    assert (expr.key, expr.operator, expr.values) == (MODEL_LABEL, "In", ["V100M16", "V100M32"])
    free = next(j for j in trace.jobs if j.name == "openb-pod-0000")
    assert not free.placement.cluster_affinity.required


def test_alibaba_whole_trace_reads(tmp_path: Path) -> None:
    trace = load_trace(ALIBABA)
    assert len(trace.jobs) == 8152
    assert sum(1 for j in trace.jobs if j.delete_ms is not None) == 897  # the Pending rows
    assert [j.submit_ms for j in trace.jobs] == sorted(j.submit_ms for j in trace.jobs)


def test_alibaba_bad_row_names_file_and_line(tmp_path: Path) -> None:
    rows = (ALIBABA / "openb_pod_list_default.csv").read_text().splitlines()[:3]
    rows[2] = rows[2].replace(",LS,", ",Platinum,")
    (tmp_path / "openb_pod_list_default.csv").write_text("\n".join(rows) + "\n")
    shutil.copy(ALIBABA / "openb_node_list_gpu_node.csv", tmp_path)
    with pytest.raises(TraceError, match=r"openb_pod_list_default.csv:3: unknown qos 'Platinum'"):
        load_trace(tmp_path)


def test_tiresias_jobs_are_gangs_of_one_gpu_workers() -> None:
    trace = load_trace(TIRESIAS)
    assert guess_format(TIRESIAS) == "tiresias"
    assert len(trace.jobs) == 60
    job1 = next(j for j in trace.jobs if j.name == "tiresias-1")  # 1,8,30,133,vgg11,147,23
    assert (job1.submit_ms, job1.runtime_ms) == (30_000, 147_000)
    assert job1.pod_sets[0].count == 8 and job1.pod_sets[0].requests["nvidia.com/gpu"] == 1
    assert len(trace.clusters) == 4 and trace.total_capacity("nvidia.com/gpu") == 128


CSV = """job,submit_s,runtime_s,count,cpu_m,memory_mib,gpu,priority,priority_class,pod_set,selector,tolerations,delete_s
train,10,3600,2,4000,16384,1,100,high,worker,region=eu;tier=gold,gpu=h100:NoSchedule;spot:NoExecute,
train,10,3600,1,1000,2048,0,100,high,launcher,,,
etl,0.5,60.25,,500,,,,,,,,30
"""


def test_csv_format_rows_and_gangs(tmp_path: Path) -> None:
    path = tmp_path / "mine.csv"
    path.write_text(CSV)
    assert guess_format(path) == "csv"
    trace = load_trace(path)
    etl, train = trace.jobs  # sorted by submit time
    assert (etl.name, etl.submit_ms, etl.runtime_ms, etl.delete_ms) == ("etl", 500, 60_250, 30_000)
    assert etl.pod_sets[0].count == 1 and etl.pod_sets[0].requests == {"cpu": 500}
    assert [ps.name for ps in train.pod_sets] == ["worker", "launcher"]
    assert train.pod_sets[0].requests == {"cpu": 4000, "memory": 16384 * MIB, "nvidia.com/gpu": 1}
    assert train.placement.cluster_selector == {"region": "eu", "tier": "gold"}
    tols = train.placement.cluster_tolerations
    assert [(t.key, t.operator, t.value, t.effect) for t in tols] == [
        ("gpu", "Equal", "h100", "NoSchedule"),
        ("spot", "Exists", "", "NoExecute"),
    ]
    assert trace.priority_classes == {"default": 0, "high": 100}


def test_csv_unknown_column_is_an_error_naming_the_format(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("job,submit_s,runtime_s,gpus\na,0,1,1\n")
    with pytest.raises(TraceError, match=r"unknown columns \['gpus'\].*docs/simulate.md"):
        load_trace(path)


def test_csv_bad_number_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("job,submit_s,runtime_s\na,0,1\nb,soon,1\n")
    with pytest.raises(TraceError, match=r"bad.csv:3: column 'submit_s': 'soon' is not a number"):
        load_trace(path)


def test_clusters_file_replaces_the_default_clusters(tmp_path: Path) -> None:
    clusters = tmp_path / "clusters.yaml"
    clusters.write_text(
        """
clusters:
  - name: east
    labels: {region: east}
    taints: [{key: gpu, value: h100, effect: NoSchedule}]
    simulated: {capacity: {cpu: "64", memory: 256Gi, nvidia.com/gpu: 8}, admissionLatency: 2s}
  - name: west
    simulated: {capacity: {nvidia.com/gpu: "4"}}
"""
    )
    trace = load_trace(TIRESIAS, clusters=clusters)
    east, west = trace.clusters
    assert east.capacity == {"cpu": 64_000, "memory": 256 * 1024 * MIB, "nvidia.com/gpu": 8}
    assert east.admission_latency_ms == 2000 and east.taints[0].key == "gpu"
    assert west.capacity == {"nvidia.com/gpu": 4} and west.admission_latency_ms == 0


def test_clusters_file_errors_have_paths(tmp_path: Path) -> None:
    clusters = tmp_path / "clusters.yaml"
    clusters.write_text("- name: east\n  simulated: {capacity: {cpu: lots}}\n")
    with pytest.raises(TraceError, match=r"clusters\[0\]\.simulated\.capacity: cpu: 'lots' is not a quantity"):
        load_trace(TIRESIAS, clusters=clusters)
    clusters.write_text("- name: east\n  labelz: {}\n")
    with pytest.raises(TraceError, match=r"labelz"):
        load_trace(TIRESIAS, clusters=clusters)


@pytest.mark.parametrize(
    ("resource", "value", "expected"),
    [("cpu", "500m", 500), ("cpu", "1.5", 1500), ("cpu", 2, 2000), ("memory", "1Gi", 1 << 30),
     ("memory", "1k", 1000), ("nvidia.com/gpu", "1", 1), ("memory", "0.5", 1)],
)
def test_quantities(resource: str, value: str | int, expected: int) -> None:
    assert to_units(resource, value) == expected


def test_quantity_rejects_garbage() -> None:
    with pytest.raises(QuantityError):
        to_units("cpu", "two")
