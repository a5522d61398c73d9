"""RBAC as the API server enforces it, from the very Role/ClusterRole/RoleBinding/
ClusterRoleBinding objects a manifest holds: a request is allowed when some binding of its
ServiceAccount grants (API group, resource[/subresource], verb) in the request's namespace
(a RoleBinding only in its own namespace, a ClusterRoleBinding everywhere), and, where the
rule names resources (``resourceNames``), only on a request for one of those names."""

from __future__ import annotations

from dataclasses import dataclass, field

GROUP_OF = {
    "pods": "",
    "nodes": "",
    "events": "",
    "secrets": "",
    "statefulsets": "apps",
    "leases": "coordination.k8s.io",
}


def token_of(namespace: str, name: str) -> str:
    """The bearer token the fake issues to a ServiceAccount."""
    return f"serviceaccount:{namespace}:{name}"


def verb_of(method: str, *, named: bool, watch: bool) -> str:
    if watch:
        return "watch"
    return {
        ("GET", True): "get",
        ("GET", False): "list",
        ("POST", False): "create",
        ("POST", True): "create",  # a subresource (pods/binding)
        ("PUT", True): "update",
        ("PATCH", True): "patch",
        ("DELETE", True): "delete",
        ("DELETE", False): "deletecollection",
    }[(method, named)]


@dataclass
class Authorizer:
    """The grants of the RBAC objects applied so far."""

    roles: dict[tuple[str | None, str], list[dict]] = field(default_factory=dict)
    bindings: list[tuple[str | None, tuple[str | None, str], str]] = field(default_factory=list)

    def apply(self, objects: list[dict]) -> None:
        """Take the RBAC objects of a manifest (others are ignored)."""
        for obj in objects:
            kind, meta = obj.get("kind"), obj.get("metadata", {})
            if kind == "ClusterRole":
                self.roles[(None, meta["name"])] = obj.get("rules", [])
            elif kind == "Role":
                self.roles[(meta["namespace"], meta["name"])] = obj.get("rules", [])
            elif kind in ("RoleBinding", "ClusterRoleBinding"):
                scope = meta.get("namespace") if kind == "RoleBinding" else None
                ref = obj["roleRef"]
                role = (None if ref["kind"] == "ClusterRole" else scope, ref["name"])
                for subject in obj.get("subjects", []):
                    if subject["kind"] == "ServiceAccount":
                        account = token_of(subject["namespace"], subject["name"])
                        self.bindings.append((scope, role, account))

    def allows(
        self,
        token: str | None,
        namespace: str | None,
        resource: str,
        verb: str,
        name: str | None = None,
    ) -> bool:
        group = GROUP_OF[resource.split("/")[0]]
        for scope, role, account in self.bindings:
            if account != token or (scope is not None and scope != namespace):
                continue
            for rule in self.roles.get(role, []):
                if (
                    group in rule.get("apiGroups", [])
                    and resource in rule.get("resources", [])
                    and verb in rule.get("verbs", [])
                    and ("resourceNames" not in rule or name in rule["resourceNames"])
                ):
                    return True
        return False
