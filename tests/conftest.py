import importlib.util
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


def postgres_url() -> str:
    """The test server's URL (scripts/services.d/10-postgresql.sh starts it and exports it);
    a test that needs it fails without it, unless TENSORTUNE_TEST_POSTGRES=absent says the
    server is left out on purpose."""
    url = os.environ.get("TENSORTUNE_TEST_POSTGRES_URL")
    if not url:
        if os.environ.get("TENSORTUNE_TEST_POSTGRES") == "absent":
            pytest.skip("TENSORTUNE_TEST_POSTGRES=absent: no PostgreSQL server for these tests")
        pytest.fail("TENSORTUNE_TEST_POSTGRES_URL is not set: run the tests through scripts/test.sh, or "
                    "`source scripts/services.d/10-postgresql.sh` first")
    return url


@pytest.fixture
def postgres_store():
    """The URL of an empty PostgreSQL store of this test's own (a schema dropped after it)."""
    import uuid

    import psycopg

    url = postgres_url()
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")
    yield f"{url}?options=-csearch_path%3D{name}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {name} CASCADE")


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path):
    """A fresh records store on each backend: an SQLite path, or a PostgreSQL URL."""
    if request.param == "sqlite":
        return str(tmp_path / "store.db")
    return request.getfixturevalue("postgres_store")


@pytest.fixture(scope="session")
def ray_cluster():
    """One Ray cluster for the whole session (starting one takes tens of seconds): a head
    and two worker nodes of 2 CPUs each, separate processes on loopback. The nodes import
    the tests' modules (a reference function travels by name). Each worker node also
    offers one GPU to Ray and serves Triton's interpreter as a target, so that GPU
    frontends run their Ray path (actors that own a GPU) under TRITON_INTERPRET=1. Needs
    the `ray` extra: a missing Ray fails the tests that use it."""
    from tensortune.distributed.local_cluster import LocalCluster
    extra = ()
    if importlib.util.find_spec("triton") is not None and os.environ.get("TRITON_INTERPRET", "0") != "0":
        from tensortune.frontends.triton.target import interpreter_target
        extra = (interpreter_target(),)
    with LocalCluster(workers=2, cpus_per_worker=2, python_path=(os.path.dirname(os.path.abspath(__file__)),),
                      gpus_per_worker=1 if extra else 0, extra_targets=extra) as c:
        yield c


@pytest.fixture(scope="module")
def interpreter():
    """A worker process with TRITON_INTERPRET=1, one per test module (Triton decides at
    import whether it interprets, so the interpreter needs a process of its own)."""
    pytest.importorskip("torch")
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed")
    from tensortune.measure import IsolatedWorker
    with IsolatedWorker(timeout=300, env={"TRITON_INTERPRET": "1"}) as worker:
        yield worker
