"""A stand-in for ``gcloud`` on a fresh Google Cloud project, for the deploy tests.

It records every call (``GCLOUD_STANDIN_LOG``, JSON lines) and keeps the project's state
(``GCLOUD_STANDIN_STATE``, JSON): enabled APIs, service accounts, IAM bindings, topics,
subscriptions, secrets, the Cloud SQL instance, images, jobs, the schedule and what was
deployed. It refuses what Google Cloud refuses, so a deploy step in the wrong order fails here
as it would there:

- a call to an API that is not enabled;
- a grant naming a service account IAM cannot see: one that does not exist, or was created a
  moment ago (IAM is eventually consistent: a new account stays invisible to the next
  ``ACCOUNT_LAG`` look-ups of it, so a script must wait for it as Google advises);
- a role on a topic, subscription, secret, repository or job that does not exist;
- a build run as the Compute Engine default account (a fresh project under the organisation
  policy that strips its roles), or as an account without the roles a build needs, or without
  saying where its logs go;
- a Cloud Run job or revision whose account cannot read its secrets, or an image not built;
- a migrate execution whose DATABASE_URL does not log in to the Cloud SQL instance.

Two things real Google Cloud reports later are refused at once, so a test sees them: a revision
whose account cannot pull its subscription or publish to its topics (a service never becomes
ready; a worker pool's instances crash-loop), and a Cloud Scheduler job whose account may not
start the Cloud Run job (its first run would fail). Flags must be given as ``--flag=value``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

ACCOUNT_LAG = 2
PROJECT_NUMBER = "123456789012"
API_OF = {
    "pubsub": "pubsub.googleapis.com",
    "iam": "iam.googleapis.com",
    "secrets": "secretmanager.googleapis.com",
    "artifacts": "artifactregistry.googleapis.com",
    "builds": "cloudbuild.googleapis.com",
    "run": "run.googleapis.com",
    "scheduler": "cloudscheduler.googleapis.com",
    "sql": "sqladmin.googleapis.com",
}
FRESH: dict[str, Any] = {
    "apis": [],
    "accounts": {},  # email -> look-ups left before IAM sees it
    "bindings": {},  # "kind:name" -> [[member, role], ...]; "project:" for the project
    "topics": [],
    "subscriptions": {},
    "secrets": {},
    "repositories": [],
    "images": [],
    "sql": {},
    "jobs": {},
    "executions": [],
    "schedules": {},
    "services": {},
    "worker_pools": {},
}


class Refused(Exception):
    """What gcloud prints as ERROR before exiting 1."""


class Cloud:
    def __init__(self, state: dict[str, Any], project: str) -> None:
        self.state = state
        self.project = project

    # --- identities and IAM ------------------------------------------------------------------

    def account_visible(self, email: str) -> bool:
        accounts = self.state["accounts"]
        if email not in accounts:
            return False
        if accounts[email] > 0:
            accounts[email] -= 1
            return False
        return True

    def require_member(self, member: str) -> None:
        kind, _, email = member.partition(":")
        if kind == "serviceAccount" and not self.account_visible(email):
            raise Refused(f"INVALID_ARGUMENT: Service account {email} does not exist.")

    def grant(self, resource: str, member: str, role: str) -> None:
        self.require_member(member)
        bindings = self.state["bindings"].setdefault(resource, [])
        if [member, role] not in bindings:
            bindings.append([member, role])

    def has_role(self, resource: str, email: str, role: str) -> bool:
        return [f"serviceAccount:{email}", role] in self.state["bindings"].get(resource, [])

    def create_account(self, account_id: str) -> None:
        email = f"{account_id}@{self.project}.iam.gserviceaccount.com"
        if email in self.state["accounts"]:
            raise Refused(f"ALREADY_EXISTS: Service account {email} already exists.")
        self.state["accounts"][email] = ACCOUNT_LAG

    # --- what a running container needs ------------------------------------------------------

    def require_secrets(self, email: str, names: list[str]) -> None:
        for name in names:
            if name not in self.state["secrets"]:
                raise Refused(f"NOT_FOUND: Secret projects/{self.project}/secrets/{name} not found")
            if not self.has_role(f"secret:{name}", email, "roles/secretmanager.secretAccessor"):
                raise Refused(
                    f"PERMISSION_DENIED: Permission denied on secret {name} for {email};"
                    " grant it roles/secretmanager.secretAccessor"
                )

    def require_image(self, image: str) -> None:
        if image not in self.state["images"]:
            raise Refused(f"Image '{image}' not found.")

    def require_database(self, email: str, connection_name: str, url: str) -> None:
        """What `llm-bot migrate` needs to log in through the Cloud SQL connector."""
        if not self.has_role("project:", email, "roles/cloudsql.client"):
            raise Refused(f"{email} lacks roles/cloudsql.client: the connector cannot connect")
        name = connection_name.rsplit(":", 1)[-1]
        instance = self.state["sql"].get(name)
        if instance is None or connection_name != f"{self.project}:{instance['region']}:{name}":
            raise Refused(f"Cloud SQL instance {connection_name} does not exist")
        parts = urlsplit(url)
        user, password = unquote(parts.username or ""), unquote(parts.password or "")
        if instance["users"].get(user) != password:
            raise Refused(f'migrate: password authentication failed for user "{user}"')
        if parts.path.lstrip("/") not in instance["databases"]:
            raise Refused(f'migrate: database "{parts.path.lstrip("/")}" does not exist')
        if f"host=/cloudsql/{connection_name}" not in parts.query:
            raise Refused("migrate: DATABASE_URL does not name the Cloud SQL socket")

    def require_pubsub(self, email: str, env: dict[str, str]) -> None:
        """What `llm-bot run` needs of Pub/Sub before it is ready."""
        prefix = env.get("BUS_PREFIX", "")
        subscription = prefix + env.get("LLM_BOT_SUBSCRIPTION", "internal.llmbot.v1.llm-bot")
        if subscription not in self.state["subscriptions"]:
            raise Refused(f"the worker's subscription {subscription} does not exist")
        if not self.has_role(f"subscription:{subscription}", email, "roles/pubsub.subscriber"):
            raise Refused(f"{email} may not pull {subscription} (roles/pubsub.subscriber)")
        for topic in ("internal.deadletter.v1", "internal.egress.v1"):
            if not self.has_role(f"topic:{prefix}{topic}", email, "roles/pubsub.publisher"):
                raise Refused(f"{email} may not publish to {prefix}{topic}")


def parse(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    words, flags = [], {}
    for arg in argv:
        if arg.startswith("--"):
            name, _, value = arg[2:].partition("=")
            flags[name] = value if "=" in arg else "true"
        else:
            words.append(arg)
    return words, flags


def container_env(template: dict[str, Any]) -> tuple[str, str, dict[str, str], list[str]]:
    """Account, image, plain env and secret names of a manifest's revision template."""
    spec = template["spec"]
    container = spec["containers"][0]
    env, secrets = {}, []
    for entry in container.get("env", []):
        if "value" in entry:
            env[entry["name"]] = str(entry["value"])
        else:
            secrets.append(entry["valueFrom"]["secretKeyRef"]["name"])
    return spec["serviceAccountName"], container["image"], env, secrets


def run(cloud: Cloud, words: list[str], flags: dict[str, str]) -> str:
    state = cloud.state
    if words and words[0] in ("beta", "alpha"):
        words = words[1:]
    group = words[0] if words else ""
    if group in API_OF and API_OF[group] not in state["apis"]:
        raise Refused(f"PERMISSION_DENIED: {API_OF[group]} has not been used in project")
    command, args = tuple(words[:3]), words[3:]
    name = args[0] if args else ""
    if words[:2] == ["services", "enable"]:
        state["apis"].extend(api for api in words[2:] if api not in state["apis"])
    elif words[:3] == ["services", "identity", "create"]:
        agents = {"pubsub.googleapis.com": "pubsub", "iap.googleapis.com": "iap"}
        if flags["service"] not in agents or flags["service"] not in state["apis"]:
            raise Refused(f"FAILED_PRECONDITION: {flags['service']} is not enabled")
        agent = (
            f"service-{PROJECT_NUMBER}@gcp-sa-{agents[flags['service']]}.iam.gserviceaccount.com"
        )
        state["accounts"].setdefault(agent, 1)
        return f"Service identity created: {agent}"
    elif words[:2] == ["projects", "describe"]:
        return PROJECT_NUMBER
    elif words[:2] == ["projects", "add-iam-policy-binding"]:
        cloud.grant("project:", flags["member"], flags["role"])
    elif command == ("iam", "service-accounts", "describe"):
        if not cloud.account_visible(name):
            raise Refused(f"NOT_FOUND: Unknown service account {name}")
        return name
    elif command == ("iam", "service-accounts", "create"):
        cloud.create_account(name)
    elif command == ("sql", "instances", "create"):
        if name in state["sql"]:
            raise Refused(f"ALREADY_EXISTS: instance {name} already exists")
        state["sql"][name] = {"region": flags["region"], "databases": [], "users": {}}
    elif command in (("sql", "databases", "create"), ("sql", "users", "create")):
        instance = state["sql"].get(flags["instance"])
        if instance is None:
            raise Refused(f"NOT_FOUND: instance {flags['instance']} does not exist")
        if name in instance[command[1]]:
            raise Refused(f"ALREADY_EXISTS: {name} already exists")
        if command[1] == "databases":
            instance["databases"].append(name)
        else:
            instance["users"][name] = flags["password"]
    elif words[:2] == ["secrets", "create"]:
        if words[2] in state["secrets"]:
            raise Refused(f"ALREADY_EXISTS: Secret {words[2]} already exists")
        state["secrets"][words[2]] = sys.stdin.read() if flags.get("data-file") == "-" else ""
    elif words[:2] == ["secrets", "describe"]:
        if words[2] not in state["secrets"]:
            raise Refused(f"NOT_FOUND: Secret {words[2]} not found")
        return words[2]
    elif words[:2] == ["secrets", "add-iam-policy-binding"]:
        if words[2] not in state["secrets"]:
            raise Refused(f"NOT_FOUND: Secret {words[2]} not found")
        cloud.grant(f"secret:{words[2]}", flags["member"], flags["role"])
    elif words[:2] == ["pubsub", "topics"]:
        return pubsub_topics(cloud, words[2], words[3], flags)
    elif words[:2] == ["pubsub", "subscriptions"]:
        return pubsub_subscriptions(cloud, words[2], words[3], flags)
    elif command == ("artifacts", "repositories", "describe"):
        if name not in state["repositories"]:
            raise Refused(f"NOT_FOUND: Repository {name} not found")
    elif command == ("artifacts", "repositories", "create"):
        state["repositories"].append(name)
    elif command == ("artifacts", "repositories", "add-iam-policy-binding"):
        if name not in state["repositories"]:
            raise Refused(f"NOT_FOUND: Repository {name} not found")
        cloud.grant(f"repository:{name}", flags["member"], flags["role"])
    elif words[:2] == ["builds", "submit"]:
        build(cloud, flags)
    elif words[:2] == ["run", "jobs"]:
        run_jobs(cloud, words[2], words[3], flags)
    elif words[:2] == ["scheduler", "jobs"]:
        return schedule(cloud, words[2:], flags)
    elif command == ("iap", "web", "add-iam-policy-binding"):
        if flags["resource-type"] != "cloud-run" or flags["service"] not in state["services"]:
            raise Refused(f"NOT_FOUND: no Cloud Run service {flags.get('service')} for IAP")
        cloud.grant(f"iap:{flags['service']}", flags["member"], flags["role"])
    elif words[:2] in (["run", "services"], ["run", "worker-pools"]):
        return deploy_revision(cloud, words[1], words[2], words[3], flags)
    else:
        raise Refused(f"the stand-in does not know `gcloud {' '.join(words)}`")
    return ""


def pubsub_topics(cloud: Cloud, verb: str, topic: str, flags: dict[str, str]) -> str:
    topics = cloud.state["topics"]
    if verb == "create":
        if topic in topics:
            raise Refused(f"ALREADY_EXISTS: Topic {topic} already exists")
        topics.append(topic)
        return ""
    if topic not in topics:
        raise Refused(f"NOT_FOUND: Resource not found (resource={topic})")
    if verb == "add-iam-policy-binding":
        cloud.grant(f"topic:{topic}", flags["member"], flags["role"])
    return f"projects/{cloud.project}/topics/{topic}"


def pubsub_subscriptions(cloud: Cloud, verb: str, name: str, flags: dict[str, str]) -> str:
    subscriptions = cloud.state["subscriptions"]
    dead_letter = flags.get("dead-letter-topic", "").rsplit("/", 1)[-1]
    if dead_letter and dead_letter not in cloud.state["topics"]:
        raise Refused(f"NOT_FOUND: dead-letter topic {dead_letter} does not exist")
    if verb == "create":
        if flags["topic"] not in cloud.state["topics"]:
            raise Refused(f"NOT_FOUND: Resource not found (resource={flags['topic']})")
        subscriptions[name] = {"ordering": "enable-message-ordering" in flags, **flags}
        return ""
    if name not in subscriptions:
        raise Refused(f"NOT_FOUND: Resource not found (resource={name})")
    if verb == "update":
        subscriptions[name].update(flags)
    elif verb == "add-iam-policy-binding":
        cloud.grant(f"subscription:{name}", flags["member"], flags["role"])
    elif "enableMessageOrdering" in flags.get("format", ""):
        return "True" if subscriptions[name]["ordering"] else ""
    return f"projects/{cloud.project}/subscriptions/{name}"


def build(cloud: Cloud, flags: dict[str, str]) -> None:
    if "service-account" not in flags:
        raise Refused(
            f"PERMISSION_DENIED: {PROJECT_NUMBER}-compute@developer.gserviceaccount.com (the"
            " Compute Engine default account builds run as) has no role to read the source,"
            " write logs or push images"
        )
    import yaml  # not at the top: each gcloud call is a process, and most read no YAML

    email = flags["service-account"].rsplit("/", 1)[-1]
    cloud.require_member(f"serviceAccount:{email}")
    config = yaml.safe_load(Path(flags["config"]).read_text())
    if config.get("options", {}).get("logging") not in ("CLOUD_LOGGING_ONLY", "NONE"):
        raise Refused(
            "INVALID_ARGUMENT: if 'build.service_account' is specified, the build must either"
            " specify 'build.logs_bucket', use the REGIONAL_USER_OWNED_BUCKET option, or use"
            " either CLOUD_LOGGING_ONLY / NONE logging options"
        )
    for role in ("roles/logging.logWriter", "roles/storage.objectViewer"):
        if not cloud.has_role("project:", email, role):
            raise Refused(f"PERMISSION_DENIED: {email} lacks {role}")
    substitutions = dict(pair.split("=", 1) for pair in flags["substitutions"].split(","))
    for image in config["images"]:
        for key, value in substitutions.items():
            image = image.replace("${" + key + "}", value)
        repository = image.split("/")[2]
        if not cloud.has_role(f"repository:{repository}", email, "roles/artifactregistry.writer"):
            raise Refused(f"PERMISSION_DENIED: {email} may not push to {repository}")
        cloud.state["images"].append(image)


def run_jobs(cloud: Cloud, verb: str, name: str, flags: dict[str, str]) -> None:
    jobs = cloud.state["jobs"]
    if verb == "deploy":
        cloud.require_member(f"serviceAccount:{flags['service-account']}")
        cloud.require_image(flags["image"])
        secrets = [pair.split("=", 1)[1].split(":")[0] for pair in flags["set-secrets"].split(",")]
        cloud.require_secrets(flags["service-account"], secrets)
        jobs[name] = flags
        return
    if name not in jobs:
        raise Refused(f"NOT_FOUND: Job [{name}] could not be found.")
    if verb == "add-iam-policy-binding":
        cloud.grant(f"job:{name}", flags["member"], flags["role"])
    elif verb == "execute":
        job = jobs[name]
        if job["args"] == "migrate":
            url = cloud.state["secrets"]["llm-bot-database-url"]
            cloud.require_database(job["service-account"], job["set-cloudsql-instances"], url)
        cloud.state["executions"].append(name)


def schedule(cloud: Cloud, words: list[str], flags: dict[str, str]) -> str:
    schedules = cloud.state["schedules"]
    verb, name = words[0], words[-1]
    if verb == "describe":
        if name not in schedules:
            raise Refused(f"NOT_FOUND: Job {name} not found")
        return name
    if verb == "update" and name not in schedules:
        raise Refused(f"NOT_FOUND: Job {name} not found")
    email = flags["oauth-service-account-email"]
    cloud.require_member(f"serviceAccount:{email}")
    job = flags["uri"].rsplit("/jobs/", 1)[-1].removesuffix(":run")
    if not cloud.has_role(f"job:{job}", email, "roles/run.invoker"):
        raise Refused(f"{email} may not run job {job} (roles/run.invoker): every run would fail")
    schedules[name] = flags
    return ""


def deploy_revision(cloud: Cloud, kind: str, verb: str, target: str, flags: dict[str, str]) -> str:
    import yaml  # not at the top: each gcloud call is a process, and most read no YAML

    deployed = cloud.state["services" if kind == "services" else "worker_pools"]
    if verb == "replace":
        manifest = yaml.safe_load(Path(target).read_text())
        email, image, env, secrets = container_env(manifest["spec"]["template"])
        cloud.require_member(f"serviceAccount:{email}")
        cloud.require_image(image)
        cloud.require_secrets(email, secrets)
        annotations = manifest["spec"]["template"]["metadata"].get("annotations", {})
        connection_name = annotations["run.googleapis.com/cloudsql-instances"]
        # The console logs in with its own URL and pulls nothing.
        console = manifest["spec"]["template"]["spec"]["containers"][0].get("args") == ["console"]
        url = cloud.state["secrets"][
            "llm-bot-console-database-url" if console else "llm-bot-database-url"
        ]
        try:
            cloud.require_database(email, connection_name, url)
            if not console:
                cloud.require_pubsub(email, env)
        except Refused as reason:
            name = manifest["metadata"]["name"]
            raise Refused(f"Revision '{name}-00001' is not ready: {reason}") from None
        deployed[manifest["metadata"]["name"]] = Path(target).read_text()
        return ""
    if target not in deployed:
        raise Refused(f"NOT_FOUND: {kind} [{target}] could not be found.")
    if verb == "add-iam-policy-binding":
        cloud.grant(f"service:{target}", flags["member"], flags["role"])
        return ""
    if verb == "update" and "instances" in flags:
        manifest = yaml.safe_load(deployed[target])
        manifest["metadata"]["annotations"]["run.googleapis.com/manualInstanceCount"] = flags[
            "instances"
        ]
        deployed[target] = yaml.safe_dump(manifest)
    return str(deployed[target]) if flags.get("format") == "export" else target


def main(argv: list[str]) -> int:
    state_path = Path(os.environ["GCLOUD_STANDIN_STATE"])
    state = (
        json.loads(state_path.read_text()) if state_path.exists() else json.loads(json.dumps(FRESH))
    )
    words, flags = parse(argv)
    project = flags.get("project") or os.environ.get("CLOUDSDK_CORE_PROJECT", "")
    if words[:1] == ["projects"] and len(words) > 2:
        project = words[2]
    cloud = Cloud(state, project)
    try:
        if not project:
            raise Refused("no project: set --project or CLOUDSDK_CORE_PROJECT")
        output, code = run(cloud, words, flags), 0
    except Refused as error:
        print(f"ERROR: (gcloud.{'.'.join(words[:3])}) {error}", file=sys.stderr)
        output, code = "", 1
    if output:
        print(output)
    state_path.write_text(json.dumps(state, indent=1))
    with Path(os.environ["GCLOUD_STANDIN_LOG"]).open("a") as log:
        log.write(json.dumps({"argv": argv, "code": code}) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
