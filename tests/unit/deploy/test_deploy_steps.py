"""The README's deploy steps, run as written on a fresh project, against a stand-in for gcloud
(``gcloud_standin.py``) that keeps the project's state and refuses what Google Cloud refuses.

The shell blocks of "Deploying to Cloud Run" up to "Check it is ready" are the steps: the test
runs them in their order in one shell, as a platform engineer pasting them would. Run in
another order (the deploy before Pub/Sub), they fail, as they would on Google Cloud.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from .gcloud_standin import PROJECT_NUMBER

ROOT = Path(__file__).resolve().parents[3]
STANDIN = Path(__file__).with_name("gcloud_standin.py")
PROJECT = "fresh-project"
WORKER = f"llm-bot@{PROJECT}.iam.gserviceaccount.com"
BUILDER = f"llm-bot-build@{PROJECT}.iam.gserviceaccount.com"
ACCESSOR = "roles/secretmanager.secretAccessor"
MANIFESTS = [
    ROOT / "deploy" / "cloudrun-worker-pool.yaml",
    ROOT / "deploy" / "cloudrun-service.yaml",
]


def readme_steps() -> list[str]:
    """The shell blocks of the deploy section before step 5, in the README's order."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Deploying to Cloud Run", 1)[1].split("5. **Check it is ready**")[0]
    blocks = re.findall(r"^( *)```sh\n(.*?)^\1```", section, flags=re.MULTILINE | re.DOTALL)
    return [textwrap.dedent(body) for _, body in blocks]


class Project:
    """A fresh project behind the stand-in: run shell in it, read its state and calls."""

    def __init__(self, tmp_path: Path) -> None:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        gcloud = bin_dir / "gcloud"
        gcloud.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN}" "$@"\n')
        gcloud.chmod(0o755)
        self.state_path, self.log_path = tmp_path / "state.json", tmp_path / "calls.jsonl"
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("CLOUDSDK_")}
        self.env = {
            **inherited,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "GCLOUD_STANDIN_STATE": str(self.state_path),
            "GCLOUD_STANDIN_LOG": str(self.log_path),
            "DEPLOY_RETRY_DELAY_S": "0",
            "OPENAI_API_KEY": "sk-test",
        }
        for name in ("GOOGLE_CLOUD_PROJECT", "REGION", "CLOUDSQL_INSTANCE", "BUS_PREFIX"):
            self.env.pop(name, None)

    def run(self, *scripts: str) -> subprocess.CompletedProcess[str]:
        """The scripts in one bash, stopping at the first failure, with the README's names."""
        prelude = "set -euo pipefail\n"
        body = "\n".join(s.replace("my-project", PROJECT) for s in scripts)
        return subprocess.run(
            ["bash", "-c", prelude + body],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    @property
    def state(self) -> dict[str, Any]:
        state: dict[str, Any] = json.loads(self.state_path.read_text())
        return state

    def calls(self) -> list[list[str]]:
        lines = self.log_path.read_text().splitlines() if self.log_path.exists() else []
        return [json.loads(line)["argv"] for line in lines]

    def has_role(self, resource: str, email: str, role: str) -> bool:
        return [f"serviceAccount:{email}", role] in self.state["bindings"].get(resource, [])


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path)


def step(containing: str) -> str:
    (block,) = [block for block in readme_steps() if containing in block]
    return block


def names() -> str:
    """Step 1's variables alone, for commands after the steps (its resources exist then)."""
    return "\n".join(
        line
        for line in step("export GOOGLE_CLOUD_PROJECT").splitlines()
        if line.startswith("export ")
    )


def test_the_readme_deploy_steps_succeed_in_order_on_a_fresh_project(project: Project) -> None:
    steps = readme_steps()
    assert [bool(re.search(r"deploy/(pubsub|deploy)\.sh", s)) for s in steps].count(True) == 2
    result = project.run(*steps)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    state = project.state
    assert project.has_role(
        "subscription:internal.llmbot.v1.llm-bot", WORKER, "roles/pubsub.subscriber"
    )
    for topic in ("internal.deadletter.v1", "internal.egress.v1"):
        assert project.has_role(f"topic:{topic}", WORKER, "roles/pubsub.publisher")
    assert project.has_role("repository:llm-bot", BUILDER, "roles/artifactregistry.writer")
    assert state["executions"] == ["llm-bot-migrate"], "the migration ran before the rollout"
    assert list(state["worker_pools"]) == ["llm-bot"]
    assert list(state["schedules"]) == ["llm-bot-maintain"]
    # ... and the service variant goes up beside it from the same image
    service = project.run(names(), "deploy/deploy.sh --service --skip-build")
    assert service.returncode == 0, service.stderr[-3000:]
    assert list(project.state["services"]) == ["llm-bot"]


def test_the_console_deploys_behind_iap_with_its_own_account(project: Project) -> None:
    assert project.run(*readme_steps()).returncode == 0
    console_url = "postgresql://llm_bot_console_login:pw@/llm_bot?host=/cloudsql/x"
    without_secret = project.run(names(), "deploy/deploy.sh --console --skip-build")
    assert without_secret.returncode == 1
    assert "llm-bot-console-database-url is missing" in without_secret.stderr
    deployed = project.run(
        names(),
        'gcloud sql users create llm_bot_console_login --instance="${CLOUDSQL_INSTANCE##*:}"'
        " --password=pw",
        f"printf %s '{console_url}' | sed \"s|/x|/$CLOUDSQL_INSTANCE|\""
        " | gcloud secrets create llm-bot-console-database-url --data-file=-",
        "CONSOLE_OPERATORS=group:ops@example.com deploy/deploy.sh --console --skip-build",
    )
    assert deployed.returncode == 0, deployed.stdout[-3000:] + deployed.stderr[-3000:]
    console = f"llm-bot-console@{PROJECT}.iam.gserviceaccount.com"
    assert project.has_role("project:", console, "roles/cloudsql.client")
    assert project.has_role("secret:llm-bot-console-database-url", console, ACCESSOR)
    assert not project.has_role("secret:llm-bot-database-url", console, ACCESSOR)
    iap_agent = f"service-{PROJECT_NUMBER}@gcp-sa-iap.iam.gserviceaccount.com"
    assert project.has_role("service:llm-bot-console", iap_agent, "roles/run.invoker")
    assert ["group:ops@example.com", "roles/iap.httpsResourceAccessor"] in project.state[
        "bindings"
    ]["iap:llm-bot-console"]
    manifest = yaml.safe_load(project.state["services"]["llm-bot-console"])
    env = {
        e["name"]: e.get("value")
        for e in manifest["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["LLM_BOT_CONSOLE_IAP_AUDIENCE"] == (
        f"/projects/{PROJECT_NUMBER}/locations/europe-west1/services/llm-bot-console"
    )


def test_the_deploy_before_pubsub_fails(project: Project) -> None:
    """Reversed: the worker's revision can pull nothing, so it is never ready."""
    reordered = [
        step("export GOOGLE_CLOUD_PROJECT"),
        step("gcloud secrets create"),
        step("deploy/deploy.sh"),
        step("deploy/pubsub.sh"),
    ]
    result = project.run(*reordered)
    assert result.returncode != 0
    assert "is not ready" in result.stderr
    assert "subscription internal.llmbot.v1.llm-bot does not exist" in result.stderr


def test_a_new_account_is_granted_only_once_iam_sees_it(project: Project) -> None:
    """The stand-in, like IAM, refuses a grant to an account made a moment ago; pubsub.sh
    waits for the account (describes it until it answers) before it names it in a grant."""
    setup = step("export GOOGLE_CLOUD_PROJECT")
    early = project.run(
        setup,
        "gcloud pubsub topics create t",
        "gcloud iam service-accounts create early",
        f"gcloud pubsub topics add-iam-policy-binding t --member=serviceAccount:early@{PROJECT}"
        ".iam.gserviceaccount.com --role=roles/pubsub.publisher",
    )
    assert early.returncode != 0
    assert "does not exist" in early.stderr
    result = project.run(names(), step("deploy/pubsub.sh"))
    assert result.returncode == 0, result.stderr[-3000:]
    calls = [" ".join(argv) for argv in project.calls()]
    created = calls.index(
        next(c for c in calls if c.startswith("iam service-accounts create llm-bot"))
    )
    first_grant = next(i for i, c in enumerate(calls) if f"serviceAccount:{WORKER}" in c)
    describes = [
        c for c in calls[created:first_grant] if c.startswith("iam service-accounts describe")
    ]
    assert len(describes) >= 2, "polled until visible"


def test_a_role_on_a_missing_topic_is_refused(project: Project) -> None:
    result = project.run(
        step("export GOOGLE_CLOUD_PROJECT"),
        "gcloud pubsub topics add-iam-policy-binding nowhere --member=user:a@b.c"
        " --role=roles/pubsub.publisher",
    )
    assert result.returncode != 0
    assert "NOT_FOUND" in result.stderr


def test_pubsub_dry_run_on_a_fresh_project_changes_nothing(project: Project) -> None:
    result = project.run(
        step("export GOOGLE_CLOUD_PROJECT"), f"deploy/pubsub.sh --dry-run --worker-sa {WORKER}"
    )
    assert result.returncode == 0, result.stderr
    assert f"would create service account {WORKER}" in result.stdout
    assert "would run: gcloud pubsub topics create internal.llmbot.v1" in result.stdout
    assert not project.state["topics"]
    assert not project.state["accounts"]


def test_a_redeploy_keeps_the_worker_pools_instance_count(project: Project) -> None:
    assert project.run(*readme_steps()).returncode == 0
    setup = names()
    assert (
        project.run(setup, "gcloud run worker-pools update llm-bot --instances=5").returncode == 0
    )
    assert project.run(setup, "deploy/deploy.sh --skip-build").returncode == 0
    assert instance_count(project) == "5"
    assert project.run(setup, "INSTANCES=3 deploy/deploy.sh --skip-build").returncode == 0
    assert instance_count(project) == "3"


def instance_count(project: Project) -> str:
    manifest = yaml.safe_load(project.state["worker_pools"]["llm-bot"])
    return str(manifest["metadata"]["annotations"]["run.googleapis.com/manualInstanceCount"])


def manifest_env(path: Path) -> dict[str, str]:
    container = yaml.safe_load(path.read_text())["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: str(e["value"]) for e in container["env"] if "value" in e}


def test_the_migrate_job_embeds_as_the_manifests_and_retries(project: Project) -> None:
    """The vector size is set, so neither the migration nor a start asks the model for it."""
    assert project.run(*readme_steps()).returncode == 0
    (job,) = [
        argv for argv in project.calls() if argv[:4] == ["run", "jobs", "deploy", "llm-bot-migrate"]
    ]
    flags = dict(arg[2:].split("=", 1) for arg in job if arg.startswith("--") and "=" in arg)
    job_env = dict(pair.split("=", 1) for pair in flags["set-env-vars"].split(","))
    embedding = {
        k: v for k, v in manifest_env(MANIFESTS[0]).items() if k.startswith("MEMORY_EMBEDDING_")
    }
    assert embedding["MEMORY_EMBEDDING_DIMENSIONS"] == "1536"
    assert job_env == embedding
    assert all(manifest_env(path).items() >= embedding.items() for path in MANIFESTS)
    assert int(flags["max-retries"]) >= 3


def test_the_build_runs_as_its_own_account(project: Project) -> None:
    assert project.run(*readme_steps()).returncode == 0
    (submit,) = [argv for argv in project.calls() if argv[:2] == ["builds", "submit"]]
    assert f"--service-account=projects/{PROJECT}/serviceAccounts/{BUILDER}" in submit
