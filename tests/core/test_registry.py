"""Registries and their plug-ins: real distributions (a dist-info with entry_points.txt, put on
sys.path) in a temporary folder, found through importlib.metadata as an installed package is."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from json_contracts import assert_contract
from qosched.cluster.policies import Policy
from qosched.cluster.policies.base import PLUGINS as CLUSTER_PLUGINS
from qosched.cluster.state import ClusterView, Decision
from qosched.core.errors import InputError
from qosched.core.registry import PluginGroup, PluginWarning, Registry
from qosched.gpushare.policies.base import PLUGINS as SHARING_PLUGINS
from qosched.placement.platform import PLUGINS as PLATFORM_PLUGINS
from qosched.placement.platform import parse_platform, platform_names

ROOT = Path(__file__).resolve().parents[2]


def install(site: Path, dist: str, files: dict[str, str], entry_points: dict[str, dict]) -> None:
    """Write distribution ``dist`` (version 1.0) into ``site``, as pip would: its modules and a
    dist-info folder whose entry_points.txt lists ``{group: {name: "module:attr"}}``."""
    for relative, text in files.items():
        path = site / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    sections = [
        f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in entries.items())
        for group, entries in entry_points.items()
    ]
    (info / "entry_points.txt").write_text("\n".join(sections))


class Builtin(Policy):
    def allocate(self, view: ClusterView) -> Decision:
        return Decision()


POLICY_MODULE = """\
from qosched.cluster.policies import Policy
from qosched.cluster.state import Decision


class Idle(Policy):
    def allocate(self, view):
        return Decision()


class Abstract(Policy):
    pass


def not_a_class():
    return Idle()
"""


@pytest.fixture
def registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Registry[Policy]:
    """A registry with the built-in ``builtin``, whose group (unique to the test) holds the
    plug-ins of one installed distribution: good ones and every kind of bad one."""
    slug = re.sub(r"\W", "_", request.node.name)
    group, module = f"qosched_test.{slug}", f"plugs_{slug}"  # a module name per test
    install(
        tmp_path,
        "test-plugs",
        {f"{module}.py": POLICY_MODULE, f"{module}_broken.py": "import no_such_module_here\n"},
        {
            group: {
                "idle": f"{module}:Idle",
                "builtin": f"{module}:Idle",
                "broken": f"{module}_broken:Anything",
                "missing": f"{module}:NoSuchClass",
                "function": f"{module}:not_a_class",
                "abstract": f"{module}:Abstract",
            }
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    made: Registry[Policy] = Registry(
        "policy", PluginGroup(group, CLUSTER_PLUGINS.conforms, CLUSTER_PLUGINS.expected)
    )
    made.register("builtin")(Builtin)
    return made


def test_a_good_plugin_is_listed_after_the_builtins_and_built_by_name(registry) -> None:
    with pytest.warns(PluginWarning):
        names = registry.names()
    assert names == ("builtin", "idle")
    made = registry.create("idle")
    assert type(made).__name__ == "Idle" and made.name == "idle"
    assert isinstance(made.allocate(None), Decision)


def test_every_bad_plugin_is_named_once_with_its_reason_and_origin(registry) -> None:
    with pytest.warns(PluginWarning) as caught:
        registry.names()
    messages = sorted(str(w.message) for w in caught)
    # (plug-in, reason) in name order: the entry points are read sorted.
    expected = [
        ("abstract", "is left out: it is <class 'plugs_"),
        ("broken", "cannot be loaded: ModuleNotFoundError: No module named 'no_such_module_here'"),
        ("builtin", "is left out: the name 'builtin' is taken by another policy"),
        ("function", "is left out: it is <function not_a_class"),
        ("missing", "cannot be loaded: AttributeError: module 'plugs_"),
    ]
    assert len(messages) == len(expected)
    for message, (name, reason) in zip(messages, expected, strict=True):
        assert message.startswith(f"policy plug-in {name!r} (entry point ")
        assert "of test-plugs 1.0) " + reason in message
    assert all(m.endswith(f"expected {CLUSTER_PLUGINS.expected}") for m in messages if "<" in m)


def test_a_clash_keeps_the_builtin(registry) -> None:
    with pytest.warns(PluginWarning) as caught:
        assert type(registry.create("builtin")) is Builtin
    assert sum("'builtin' is taken" in str(w.message) for w in caught) == 1


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("broken", "cannot be loaded: ModuleNotFoundError"),
        ("missing", "cannot be loaded: AttributeError"),
        ("function", "expected a subclass of qosched.cluster.policies.Policy"),
        ("abstract", "that implements allocate"),
    ],
)
def test_asking_for_a_bad_plugin_says_why(registry, name: str, reason: str) -> None:
    with pytest.warns(PluginWarning), pytest.raises(InputError) as caught:
        registry.create(name)
    assert f"policy plug-in {name!r}" in str(caught.value) and reason in str(caught.value)


def test_an_unknown_name_lists_the_known_policies_and_the_plugins_left_out(registry) -> None:
    with pytest.warns(PluginWarning), pytest.raises(InputError) as caught:
        registry.create("nope")
    assert "unknown policy 'nope'; known policies: builtin, idle" in str(caught.value)
    assert "plug-ins left out: abstract, broken, builtin, function, missing" in str(caught.value)


def test_two_plugins_of_one_name_keep_the_first_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = "qosched_test.two_of_one_name"
    for dist, cls in (("first-plugs", "Idle"), ("second-plugs", "Other")):
        module = f"{dist.replace('-', '_')}_mod"
        code = POLICY_MODULE + "\n\nclass Other(Idle):\n    pass\n"
        install(tmp_path, dist, {f"{module}.py": code}, {group: {"same": f"{module}:{cls}"}})
    monkeypatch.syspath_prepend(str(tmp_path))
    made: Registry[Policy] = Registry(
        "policy", PluginGroup(group, CLUSTER_PLUGINS.conforms, CLUSTER_PLUGINS.expected)
    )
    with pytest.warns(PluginWarning, match="second-plugs 1.0.* 'same' is taken"):
        assert type(made.create("same")).__name__ == "Idle"


def test_a_registry_without_plugins_looks_for_none() -> None:
    made: Registry[Policy] = Registry("policy")
    made.register("builtin")(Builtin)
    assert made.names() == ("builtin",)
    with pytest.raises(ValueError, match="already registered"):
        made.register("builtin")(Builtin)


SHARING_MODULE = """\
from qosched.gpushare.policy import KernelDecision, SharingPolicy


class Subclass(SharingPolicy):
    def decide(self, view):
        return KernelDecision(start=view.waiting)


class DecidesOnly:
    def decide(self, view):
        return KernelDecision(start=view.waiting)


class NoDecide(SharingPolicy):
    pass
"""

PLATFORM_MODULE = """\
from qosched.placement.platform import CoreSetsPlatform, Platform, RooflinePlatform


class Roofline(RooflinePlatform):
    @classmethod
    def parse(cls, machine, source):
        return cls("T4", "PCIe3-x16")


class Runnable(CoreSetsPlatform):
    @classmethod
    def parse(cls, machine, source):
        return cls((0,), (1,))


class CostsNothing(Platform):
    @classmethod
    def parse(cls, machine, source):
        return cls()

    def pinned_processors(self):
        raise AssertionError("not runnable")

    def to_dict(self):
        return {"platform": self.name}

    def describe(self):
        return "no costs"


class Unfinished(Platform):
    runnable = True
"""


def _level_registry(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    what: str,
    plugins: PluginGroup,
    code: str,
    entries: dict[str, str],
) -> Registry:
    """A registry with the conformance of a real level's ``plugins``, whose group (unique to
    the test) holds ``entries`` (name -> class) of one module, ``code``."""
    group, module = f"qosched_test.{what.replace(' ', '_')}", f"level_{what.replace(' ', '_')}"
    install(tmp_path, "level-plugs", {f"{module}.py": code},
            {group: {name: f"{module}:{cls}" for name, cls in entries.items()}})  # fmt: skip
    monkeypatch.syspath_prepend(str(tmp_path))
    return Registry(what, PluginGroup(group, plugins.conforms, plugins.expected))


def test_a_sharing_plugin_is_a_subclass_of_sharing_policy_that_decides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entries = {"subclass": "Subclass", "decides-only": "DecidesOnly", "no-decide": "NoDecide"}
    made = _level_registry(tmp_path, monkeypatch, "sharing policy", SHARING_PLUGINS,
                           SHARING_MODULE, entries)  # fmt: skip
    with pytest.warns(PluginWarning) as caught:
        assert made.names() == ("subclass",)
    left_out = sorted(str(w.message) for w in caught)
    assert [m.split("'")[1] for m in left_out] == ["decides-only", "no-decide"]
    expected = "expected a subclass of qosched.gpushare.policy.SharingPolicy that implements decide"
    assert all(m.endswith(expected) for m in left_out)
    made_one = made.create("subclass")
    assert made_one.name == "subclass" and made_one.stream_priorities is True


def test_a_platform_plugin_is_runnable_or_a_roofline_platform(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entries = {
        "roofline-box": "Roofline",
        "runnable-box": "Runnable",
        "costs-nothing": "CostsNothing",
        "unfinished": "Unfinished",
    }
    made = _level_registry(tmp_path, monkeypatch, "platform", PLATFORM_PLUGINS,
                           PLATFORM_MODULE, entries)  # fmt: skip
    with pytest.warns(PluginWarning) as caught:
        assert made.names() == ("roofline-box", "runnable-box")
    left_out = sorted(str(w.message) for w in caught)
    assert [m.split("'")[1] for m in left_out] == ["costs-nothing", "unfinished"]
    assert all(m.endswith(f"expected {PLATFORM_PLUGINS.expected}") for m in left_out)
    box = made.get("roofline-box").parse({"platform": "roofline-box"}, "lab.yaml")
    assert (box.name, box.gpu, box.runnable) == ("roofline-box", "T4", False)
    assert box.to_dict() == {"platform": "roofline-box", "gpu": "T4", "link": "PCIe3-x16"}


def test_an_unknown_platform_lists_the_platforms_on_the_spec_field() -> None:
    with pytest.raises(InputError) as caught:
        parse_platform({"platform": "tpu"}, "spec.yaml")
    assert str(caught.value) == (
        "spec.yaml: field 'machine.platform': unknown platform 'tpu'; known platforms: "
        + ", ".join(platform_names())
    )
    assert platform_names()[:3] == ("roofline", "cpu-sets", "cuda")


@pytest.mark.process
def test_the_command_names_a_bad_plugin_and_runs_the_builtin_it_clashes_with(
    tmp_path: Path,
) -> None:
    code = "from qosched.cluster.policies import Policy\n\n\nclass Mine(Policy):\n    pass\n"
    install(tmp_path, "clash", {"clash_mod.py": code},
            {"qosched.cluster_policies": {"fifo": "clash_mod:Mine"}})  # fmt: skip
    trace = tmp_path / "trace.csv"
    probe = (
        "from qosched.cli.main import main\n"
        f"main(['trace', 'generate', '--out', {str(trace)!r}, '--jobs', '5'])\n"
        f"main(['sim', 'cluster', '--trace', {str(trace)!r}, '--nodes', '1', '--gpus-per-node', "
        "'8', '--policy', 'fifo', '--json'])\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    done = subprocess.run([sys.executable, "-c", probe], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["policy"] == "fifo"
    warned = [line for line in done.stderr.splitlines() if "plug-in" in line]
    assert warned == [
        "qosched: warning: policy plug-in 'fifo' (entry point 'clash_mod:Mine' in group "
        "'qosched.cluster_policies' of clash 1.0) is left out: the name 'fifo' is taken by "
        "another policy"
    ]


# --- the worked example of docs/plugins.md -------------------------------------------------------


def example_blocks() -> dict[str, str]:
    """The page's code blocks by the file each one is introduced as (a `path`: line above)."""
    text = (ROOT / "docs" / "plugins.md").read_text(encoding="utf-8")
    found = re.findall(r"^`([\w/.]+)`:[^\n]*\n(?:[^`\n][^\n]*\n)*\n```\w+\n(.*?)```", text,
                       flags=re.M | re.S)  # fmt: skip
    return dict(found)


@pytest.mark.process
def test_the_documented_example_installs_and_runs_from_its_three_commands(tmp_path: Path) -> None:
    blocks = example_blocks()
    assert set(blocks) == {
        "my_plugins/cluster.py",
        "my_plugins/sharing.py",
        "my_plugins/platform.py",
        "pyproject.toml",
        "lab.yaml",
    }
    project = tomllib.loads(blocks["pyproject.toml"])["project"]
    files = {path: code for path, code in blocks.items() if path.endswith(".py")}
    files["my_plugins/__init__.py"] = ""
    site = tmp_path / "site"
    install(site, project["name"], files, project["entry-points"])
    trace = tmp_path / "trace.csv"
    lab = tmp_path / "lab.yaml"
    lab.write_text(blocks["lab.yaml"])
    probe = (
        # A plug-in left out would warn: here that is an error.
        "import warnings\nfrom qosched.core.registry import PluginWarning\n"
        "warnings.simplefilter('error', PluginWarning)\nfrom qosched.cli.main import main\n"
        f"main(['trace', 'generate', '--out', {str(trace)!r}, '--jobs', '30', "
        "'--cluster-gpus', '16'])\n"
        f"main(['sim', 'cluster', '--trace', {str(trace)!r}, '--nodes', '2', '--gpus-per-node', "
        "'8', '--policy', 'smallest-first', '--json'])\n"
        f"main(['gpu', 'sim', {str(ROOT / 'examples' / 'gpu_apps_kernels.yaml')!r}, "
        "'--policy', 'top-priority-only', '--json'])\n"
        f"main(['infer', 'plan', {str(lab)!r}, '--json'])\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *sys.path])}
    done = subprocess.run([sys.executable, "-c", probe], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    cluster, sharing, plan = (json.loads(line) for line in done.stdout.splitlines())
    assert_contract("sim-cluster", cluster)
    assert_contract("gpu-sim", sharing)
    assert_contract("infer-plan", plan)
    assert [t["name"] for t in plan["tenants"]] == ["a"] and plan["throughput_rps"] > 0
    assert (cluster["policy"], sharing["policy"]) == ("smallest-first", "top-priority-only")
    assert cluster["jobs"] == 30 and cluster["accepted"] == 30
    # The most important app is served first: every request it made finished.
    top = max(sharing["apps"], key=lambda app: app["priority"])
    assert top["completed"] > 0 and top["unfinished"] == 0
