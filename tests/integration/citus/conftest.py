"""A local Citus cluster (a coordinator and two workers), started once per session.

The tests skip, with the reason, where Citus is not built (a bare clone without
``../shared/vendor``): ``make test`` builds it first when the source is there.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from llm_bot_tools.local.citus_build import find_install, unavailable_reason
from llm_bot_tools.local.citus_cluster import CitusCluster


@pytest.fixture(scope="session")
def citus_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CitusCluster]:
    install = find_install()
    if install is None:
        pytest.skip(unavailable_reason() or "Citus is not built")
    with CitusCluster(install, tmp_path_factory.mktemp("citus")) as cluster:
        yield cluster


@pytest.fixture
def citus_database_url(citus_cluster: CitusCluster, unique_name: str) -> Iterator[str]:
    """A database of the test's own on every node, Citus in each and the workers registered:
    the coordinator's URL for it."""
    url = citus_cluster.create_database(unique_name)
    yield url
    citus_cluster.drop_database(unique_name)
