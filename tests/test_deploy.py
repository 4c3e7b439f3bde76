"""The Kubernetes manifests (deploy/kubernetes): valid against the Kubernetes schemas, and
consistent with the service they run (its settings, probes, port, drain time)."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from app.config import Settings

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy" / "kubernetes"
KUBERNETES = "1.33.0"
MANIFESTS = ["deployment.yaml", "service.yaml", "pdb.yaml", "secret.example.yaml"]


def load(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / name).read_text())
    return loaded


def container() -> dict[str, Any]:
    found: dict[str, Any] = load("deployment.yaml")["spec"]["template"]["spec"]["containers"][0]
    return found


@pytest.mark.parametrize("name", MANIFESTS)
def test_each_manifest_is_valid_for_kubernetes(name: str) -> None:
    kubernetes_validate.validate(load(name), KUBERNETES, strict=True)


def test_the_validator_refuses_a_misspelt_field() -> None:
    broken = copy.deepcopy(load("deployment.yaml"))
    spec = broken["spec"]["template"]["spec"]["containers"][0]
    spec["readinesProbe"] = spec.pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES, strict=True)


def test_kustomize_applies_everything_but_the_example_secret() -> None:
    resources = load("kustomization.yaml")["resources"]
    assert sorted(resources) == sorted(set(MANIFESTS) - {"secret.example.yaml"})


def test_probes_port_and_selectors_match_the_service() -> None:
    spec = container()
    assert spec["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert spec["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert [port["containerPort"] for port in spec["ports"]] == [8000]
    assert re.search(r"^EXPOSE 8000$", (ROOT / "Dockerfile").read_text(), re.M)
    labels = load("deployment.yaml")["spec"]["template"]["metadata"]["labels"]
    assert load("service.yaml")["spec"]["selector"] == labels
    assert load("pdb.yaml")["spec"]["selector"]["matchLabels"] == labels
    assert load("service.yaml")["spec"]["ports"][0]["targetPort"] == spec["ports"][0]["name"]
    requests = spec["resources"]["requests"]
    assert {"cpu", "memory"} <= set(requests)


def test_every_variable_is_a_setting_and_every_secret_key_is_documented() -> None:
    settings = {name.upper() for name in Settings.model_fields}
    secret_keys = set(load("secret.example.yaml")["stringData"])
    for variable in container()["env"]:
        assert variable["name"] in settings, variable["name"]
        ref = variable.get("valueFrom", {}).get("secretKeyRef")
        if ref is not None:
            assert ref["name"] == "toolgate"
            assert ref["key"] == variable["name"]
            assert ref["key"] in secret_keys or ref.get("optional"), ref
    named = {variable["name"]: variable.get("value") for variable in container()["env"]}
    assert named["LIMITS"] == "shared" and named["APP_ENV"] == "production"
    for secret in ("MONGODB_URL", "ADMIN_API_KEY", "API_KEY_SECRET", "SECRETS_KEY"):
        assert named[secret] is None, f"{secret} must come from the Secret"


def test_a_replica_is_given_the_time_to_drain_its_chats() -> None:
    pod = load("deployment.yaml")["spec"]["template"]["spec"]
    default_deadline = Settings.model_fields["chat_deadline_s"].default
    pre_stop = container()["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pod["terminationGracePeriodSeconds"] >= pre_stop + default_deadline + 5


def test_new_connections_are_served_until_the_endpoint_is_gone() -> None:
    """SIGTERM closes the listener at once: the preStop delay keeps it open while the endpoint
    is removed from the Service and the load balancers."""
    assert container()["lifecycle"]["preStop"]["sleep"]["seconds"] >= 5


def test_replicas_spread_over_nodes_and_zones() -> None:
    pod = load("deployment.yaml")["spec"]["template"]
    labels = pod["metadata"]["labels"]
    spread = pod["spec"]["topologySpreadConstraints"]
    keys = {rule["topologyKey"] for rule in spread}
    assert keys == {"kubernetes.io/hostname", "topology.kubernetes.io/zone"}
    for rule in spread:
        assert rule["labelSelector"]["matchLabels"] == labels and rule["maxSkew"] == 1
        # Never refuse to schedule on a one-node or one-zone cluster.
        assert rule["whenUnsatisfiable"] == "ScheduleAnyway"


def test_the_run_journal_is_on_a_volume_that_outlives_the_container() -> None:
    spec = container()
    named = {variable["name"]: variable.get("value") for variable in spec["env"]}
    mounts = {mount["mountPath"]: mount["name"] for mount in spec["volumeMounts"]}
    volume = mounts[named["RUN_JOURNAL_DIR"]]
    volumes = load("deployment.yaml")["spec"]["template"]["spec"]["volumes"]
    assert "emptyDir" in next(v for v in volumes if v["name"] == volume)


def test_the_image_is_a_placeholder_the_docs_build_and_push() -> None:
    """Issue 43: the Deployment named an image nobody publishes, and no page said how to build
    and push one. The manifest names a placeholder that kustomize replaces with the operator's
    own image, and docs/replicas.md builds, pushes and sets exactly that image."""
    image = container()["image"]
    assert "/" not in image and ":" not in image  # no registry, no tag: a name to replace
    [entry] = load("kustomization.yaml")["images"]
    assert entry["name"] == image and entry["newName"].startswith("registry.example.com/")
    pushed = f"{entry['newName']}:{entry['newTag']}"
    docs = (ROOT / "docs" / "replicas.md").read_text()
    assert f"docker build -t {pushed} ." in docs and f"docker push {pushed}" in docs
    assert f"kustomize edit set image {image}=" in docs


def test_the_shared_journal_overlay_puts_the_journal_on_one_volume() -> None:
    """deploy/kubernetes/shared-journal: a ReadWriteMany claim, valid for Kubernetes, and a
    patch that replaces exactly the base Deployment's run-journal volume with it."""
    claim = load("shared-journal/run-journal-pvc.yaml")
    kubernetes_validate.validate(claim, KUBERNETES, strict=True)
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    overlay = load("shared-journal/kustomization.yaml")
    assert overlay["resources"] == ["..", "run-journal-pvc.yaml"]
    patch = yaml.safe_load(overlay["patches"][0]["patch"])
    test, replace = patch
    volumes = load("deployment.yaml")["spec"]["template"]["spec"]["volumes"]
    index = int(test["path"].split("/")[-2])
    assert volumes[index]["name"] == test["value"] == "run-journal"
    assert replace["value"]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    mounted = [m["name"] for m in container()["volumeMounts"]]
    assert "run-journal" in mounted
