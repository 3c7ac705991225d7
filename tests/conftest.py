import os

import pytest

# Triton decides when it is first imported whether it interprets kernels; on a machine
# without a GPU every test must see the interpreter, whichever test imports triton first.
if not os.path.exists("/dev/nvidiactl"):
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    """Every test gets its own database and caches; nothing touches ~/.cache."""
    monkeypatch.setenv("TENSORTUNE_DB", str(tmp_path / "tuning.db"))
    monkeypatch.setenv("TENSORTUNE_PROGRESS", "0")
    yield


@pytest.fixture(scope="session")
def shared_datasets():
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.normpath(os.path.join(here, "..", "..", "shared", "datasets"))
    if not os.path.isdir(path):
        pytest.skip("../shared/datasets is not present")
    return path


@pytest.fixture(scope="session")
def ray_cluster():
    """One Ray cluster for the whole session (starting one takes tens of seconds): a head
    and two worker nodes of 2 CPUs each, separate processes on loopback. The nodes import
    the tests' modules (a reference function travels by name). Needs the `ray` extra: a
    missing Ray fails the tests that use it."""
    from tensortune.distributed.local_cluster import LocalCluster
    with LocalCluster(workers=2, cpus_per_worker=2, python_path=(os.path.dirname(os.path.abspath(__file__)),)) as c:
        yield c
