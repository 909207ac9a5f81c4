"""The part of the stasis HTTP API this client relies on.

Every request the client sends goes through a route declared here (the
request builder looks the method and path up by key), and the drift test
(``tests/test_contract.py``) checks each declaration against the running
daemon's ``/openapi.json``: the route and method exist, the query parameters
are declared, and where the document gives a schema, every field the client
sends or reads is a property of it. Routes the server adds do not matter;
a route, parameter or field the client uses that is renamed or removed fails
the test.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Body:
    """A JSON body: the component schema that describes it and the fields used."""

    schema: str
    fields: tuple[str, ...]
    # The body is a JSON array of `schema` items.
    array: bool = False


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    query: tuple[str, ...] = ()
    request: Body | None = None
    response: Body | None = None
    # Status codes the client treats as success for this route.
    ok: tuple[int, ...] = field(default=(200,))


SANDBOX_FIELDS = (
    "id",
    "state",
    "backend",
    "manifest",
    "manifest_digest",
    "created_at_ms",
    "running_ms",
    "reason",
    "paused_at_ms",
    "expires_at_ms",
    "pause_kind",
    "pause_snapshot",
    "source_snapshot",
    "timing",
    "labels",
)
TEMPLATE_FIELDS = (
    "name",
    "version",
    "reference",
    "snapshot",
    "backend",
    "manifest_digest",
    "source_sandbox",
    "created_by",
    "created_at_ms",
)
EXEC_BODY_FIELDS = ("argv", "env", "cwd", "timeout_ms", "stdin_b64")
EXEC_RESPONSE_FIELDS = (
    "exit_code",
    "signal",
    "stdout_b64",
    "stderr_b64",
    "timed_out",
    "truncated",
    "duration_ms",
)

ROUTES: dict[str, Route] = {
    "health": Route("get", "/healthz"),
    "sandbox.create": Route(
        "post",
        "/v1/sandboxes",
        request=Body("CreateSandbox", ("manifest", "template", "labels")),
        response=Body("Sandbox", SANDBOX_FIELDS),
        ok=(201,),
    ),
    "sandbox.list": Route(
        "get",
        "/v1/sandboxes",
        # The next page's cursor comes in the `x-next-cursor` header.
        query=("state", "label", "created_after", "limit", "cursor"),
        response=Body("Sandbox", SANDBOX_FIELDS, True),
    ),
    "sandbox.lifecycle": Route(
        "patch",
        "/v1/sandboxes/{id}/lifecycle",
        request=Body(
            "LifecycleChange",
            ("idle_timeout_secs", "on_idle", "paused_ttl_secs", "max_lifetime_secs", "timeout_secs"),
        ),
        response=Body("Sandbox", SANDBOX_FIELDS),
    ),
    "sandbox.get": Route("get", "/v1/sandboxes/{id}", response=Body("Sandbox", SANDBOX_FIELDS)),
    "sandbox.destroy": Route(
        "delete", "/v1/sandboxes/{id}", response=Body("Sandbox", SANDBOX_FIELDS)
    ),
    "sandbox.exec": Route(
        "post",
        "/v1/sandboxes/{id}/exec",
        request=Body("ExecBody", EXEC_BODY_FIELDS),
        response=Body("ExecResponse", EXEC_RESPONSE_FIELDS),
    ),
    "sandbox.exec_stream": Route(
        "post",
        "/v1/sandboxes/{id}/exec/stream",
        request=Body("ExecBody", EXEC_BODY_FIELDS),
        # NDJSON lines; the variants are checked by the drift test separately.
        response=None,
    ),
    "files.put": Route(
        "put", "/v1/sandboxes/{id}/files", query=("path", "mode", "exclusive"), ok=(204,)
    ),
    "files.get": Route(
        "get", "/v1/sandboxes/{id}/files", query=("path", "offset", "length"), ok=(200, 206)
    ),
    "files.list": Route("get", "/v1/sandboxes/{id}/files/list", query=("path",)),
    "files.remove": Route(
        "delete", "/v1/sandboxes/{id}/files", query=("path", "recursive"), ok=(204,)
    ),
    "files.stat": Route("get", "/v1/sandboxes/{id}/files/stat", query=("path",)),
    "files.exists": Route(
        "get",
        "/v1/sandboxes/{id}/files/exists",
        query=("path",),
        response=Body("Exists", ("exists",)),
    ),
    "files.mkdir": Route(
        "post",
        "/v1/sandboxes/{id}/files/mkdir",
        request=Body("MkdirBody", ("path", "parents")),
        ok=(204,),
    ),
    "files.rename": Route(
        "post",
        "/v1/sandboxes/{id}/files/rename",
        request=Body("RenameBody", ("from", "to")),
        ok=(204,),
    ),
    # NDJSON lines of {kind, path, to?}.
    "files.watch": Route("get", "/v1/sandboxes/{id}/files/watch", query=("path",)),
    "session.start": Route("post", "/v1/sandboxes/{id}/sessions", ok=(201,)),
    "session.list": Route("get", "/v1/sandboxes/{id}/sessions"),
    "session.input": Route(
        "post",
        "/v1/sandboxes/{id}/sessions/{session}/input",
        request=Body("SessionInput", ("data_b64",)),
        ok=(204,),
    ),
    "session.output": Route(
        "get",
        "/v1/sandboxes/{id}/sessions/{session}/output",
        query=("offset", "wait_ms"),
        response=Body(
            "SessionOutputResponse",
            (
                "offset",
                "data_b64",
                "stdout_b64",
                "stderr_b64",
                "next_offset",
                "running",
                "exit_code",
            ),
        ),
    ),
    "session.kill": Route(
        "delete", "/v1/sandboxes/{id}/sessions/{session}", query=("signal",), ok=(204,)
    ),
    "session.resize": Route(
        "post", "/v1/sandboxes/{id}/sessions/{session}/resize", ok=(204,)
    ),
    "sandbox.usage": Route("get", "/v1/sandboxes/{id}/usage"),
    "sandbox.network": Route(
        "get",
        "/v1/sandboxes/{id}/network",
        response=Body("NetworkStatus", ("policy", "attached", "counters")),
    ),
    "sandbox.set_network": Route(
        "patch",
        "/v1/sandboxes/{id}/network",
        request=Body("SetNetwork", ("allow", "deny")),
        response=Body("NetworkStatus", ("policy", "attached", "counters")),
    ),
    "sandbox.pause": Route(
        "post",
        "/v1/sandboxes/{id}/pause",
        request=Body("PauseBody", ("keep_memory",)),
        response=Body("Sandbox", SANDBOX_FIELDS),
    ),
    "sandbox.resume": Route(
        "post", "/v1/sandboxes/{id}/resume", response=Body("Sandbox", SANDBOX_FIELDS)
    ),
    "sandbox.snapshot": Route(
        "post",
        "/v1/sandboxes/{id}/snapshots",
        request=Body("SnapshotBody", ("ttl_secs",)),
        ok=(201,),
    ),
    "sandbox.fork": Route(
        "post",
        "/v1/sandboxes/{id}/fork",
        request=Body("ForkBody", ("count",)),
        response=Body("ForkResponse", ("snapshot", "sandboxes", "total_ms")),
        ok=(201,),
    ),
    "port.url": Route(
        "post",
        "/v1/sandboxes/{id}/ports/{port}/urls",
        request=Body("NewPortUrl", ("ttl_secs",)),
        response=Body("PortUrl", ("id", "path", "port", "expires_at_ms")),
        ok=(201,),
    ),
    "port.revoke_all": Route("delete", "/v1/sandboxes/{id}/ports/{port}/urls", ok=(204,)),
    "port.revoke": Route(
        "delete", "/v1/sandboxes/{id}/ports/{port}/urls/{url_id}", ok=(204,)
    ),
    "image.list": Route("get", "/v1/images"),
    "image.get": Route("get", "/v1/images/{name}"),
    "image.delete": Route("delete", "/v1/images/{name}", ok=(204,)),
    "image.import": Route("post", "/v1/images/import", query=("name",), ok=(201,)),
    "snapshot.list": Route("get", "/v1/snapshots"),
    "snapshot.get": Route("get", "/v1/snapshots/{id}"),
    "snapshot.delete": Route("delete", "/v1/snapshots/{id}", ok=(204,)),
    "snapshot.restore": Route(
        "post",
        "/v1/snapshots/{id}/restore",
        request=Body("RestoreBody", ("manifest",)),
        response=Body("Sandbox", SANDBOX_FIELDS),
        ok=(201,),
    ),
    "token.create": Route(
        "post",
        "/v1/tokens",
        request=Body("TokenRequest", ("name", "scopes", "ttl_secs", "sandbox")),
        response=Body("NewToken", ("id", "token", "scopes", "expires_at_ms", "sandbox")),
        ok=(201,),
    ),
    "token.list": Route("get", "/v1/tokens"),
    "token.revoke": Route("delete", "/v1/tokens/{token}"),
    "token.rotate": Route(
        "post",
        "/v1/tokens/{token}/rotate",
        request=Body("RotateRequest", ("overlap_secs",)),
        response=Body("NewToken", ("id", "token", "rotated_from")),
        ok=(201,),
    ),
    "webhook.create": Route(
        "post",
        "/v1/webhooks",
        request=Body("CreateWebhook", ("url", "events")),
        ok=(201,),
    ),
    "webhook.list": Route(
        "get",
        "/v1/webhooks",
        response=Body("WebhookInfo", ("id", "url", "events", "delivered", "failed"), True),
    ),
    "webhook.delete": Route("delete", "/v1/webhooks/{id}", ok=(204,)),
    "webhook.dead_letters": Route("get", "/v1/webhooks/{id}/dead-letters"),
    "template.create": Route(
        "post",
        "/v1/templates",
        request=Body("CreateTemplate", ("name", "from_sandbox")),
        response=Body("TemplateInfo", TEMPLATE_FIELDS),
        ok=(201,),
    ),
    "template.list": Route(
        "get", "/v1/templates", response=Body("TemplateInfo", TEMPLATE_FIELDS, True)
    ),
    "template.get": Route(
        "get",
        "/v1/templates/{name}",
        response=Body("TemplateVersions", ("name", "latest", "versions")),
    ),
    "template.delete": Route(
        "delete", "/v1/templates/{name}", response=Body("TemplateInfo", TEMPLATE_FIELDS, True)
    ),
    "template.delete_version": Route(
        "delete",
        "/v1/templates/{name}/{version}",
        response=Body("TemplateInfo", TEMPLATE_FIELDS, True),
    ),
    "run.create": Route("post", "/v1/runs", ok=(201,)),
    "run.list": Route("get", "/v1/runs"),
    "run.get": Route("get", "/v1/runs/{id}"),
    "run.step": Route("post", "/v1/runs/{id}/steps"),
    "run.call": Route("post", "/v1/runs/{id}/tool-calls", ok=(200, 202)),
    "run.approve": Route("post", "/v1/runs/{id}/approvals/{call}/approve", ok=(200, 202)),
    "run.reject": Route("post", "/v1/runs/{id}/approvals/{call}/reject", ok=(200, 202)),
    "run.state": Route("get", "/v1/runs/{id}/state"),
    "run.resume": Route("post", "/v1/runs/resume"),
}

# The NDJSON line variants of a streaming exec (schema ExecStreamLine) and the
# fields the client reads from each.
EXEC_STREAM_LINES: dict[str, tuple[str, ...]] = {
    "output": ("stream", "data_b64"),
    "exit": ("exit_code", "signal", "timed_out", "truncated", "duration_ms"),
    "error": ("code", "message"),
}

# The error envelope every failing route answers with.
ERROR_FIELDS = {"ErrorBody": ("error",), "ErrorDetail": ("code", "message", "field")}


def _resolve(spec: dict, schema: dict) -> dict:
    seen = 0
    while isinstance(schema, dict) and "$ref" in schema and seen < 16:
        name = schema["$ref"].rsplit("/", 1)[-1]
        schema = spec.get("components", {}).get("schemas", {}).get(name, {})
        seen += 1
    return schema if isinstance(schema, dict) else {}


def _properties(spec: dict, schema: dict) -> set[str]:
    """Property names of a schema, following $ref, allOf and the variants of oneOf/anyOf."""
    schema = _resolve(spec, schema)
    props = set((schema.get("properties") or {}).keys())
    for key in ("allOf", "oneOf", "anyOf"):
        for sub in schema.get(key) or []:
            props |= _properties(spec, sub)
    return props


def _json_schema(content: dict) -> dict | None:
    for ctype, media in (content or {}).items():
        if "json" in ctype and isinstance(media, dict) and "schema" in media:
            return media["schema"]
    return None


def check_openapi(spec: dict) -> list[str]:
    """Problems between this client's routes and an OpenAPI document ([] = none)."""
    problems: list[str] = []
    components = spec.get("components", {}).get("schemas", {})
    paths = spec.get("paths", {})
    for key, route in ROUTES.items():
        op = (paths.get(route.path) or {}).get(route.method)
        if op is None:
            problems.append(f"{key}: {route.method.upper()} {route.path} is not in the API")
            continue
        params = {p.get("name") for p in op.get("parameters") or [] if p.get("in") == "query"}
        for q in route.query:
            if q not in params:
                problems.append(f"{key}: query parameter {q!r} is not declared")
        if route.request is not None:
            body = _json_schema((op.get("requestBody") or {}).get("content") or {})
            if body is None or _resolve(spec, body) != _resolve(
                spec, {"$ref": f"#/components/schemas/{route.request.schema}"}
            ):
                problems.append(f"{key}: request body is not the schema {route.request.schema}")
            problems += _check_fields(spec, components, key, "request", route.request)
        if route.response is not None:
            found = None
            for status in route.ok:
                resp = (op.get("responses") or {}).get(str(status)) or {}
                found = _json_schema(resp.get("content") or {}) or found
            if found is None:
                problems.append(f"{key}: no JSON response schema for {route.ok}")
            else:
                target = found.get("items", found) if route.response.array else found
                if route.response.array and found.get("type") != "array":
                    problems.append(f"{key}: response is not an array")
                if _resolve(spec, target) != _resolve(
                    spec, {"$ref": f"#/components/schemas/{route.response.schema}"}
                ):
                    problems.append(f"{key}: response is not the schema {route.response.schema}")
            problems += _check_fields(spec, components, key, "response", route.response)
    # The streaming exec's NDJSON lines.
    line = components.get("ExecStreamLine")
    if line is None:
        problems.append("schema ExecStreamLine is missing")
    else:
        variants: dict[str, set[str]] = {}
        for sub in line.get("oneOf") or []:
            sub = _resolve(spec, sub)
            tag = ((sub.get("properties") or {}).get("type") or {}).get("enum") or []
            for t in tag:
                variants[t] = _properties(spec, sub)
        for kind, fields in EXEC_STREAM_LINES.items():
            if kind not in variants:
                problems.append(f"ExecStreamLine: variant {kind!r} is missing")
                continue
            for f in fields:
                if f not in variants[kind]:
                    problems.append(f"ExecStreamLine.{kind}: field {f!r} is missing")
    for schema, fields in ERROR_FIELDS.items():
        problems += _check_fields(spec, components, "errors", "error", Body(schema, fields))
    return problems


def _check_fields(spec: dict, components: dict, key: str, what: str, body: Body) -> list[str]:
    if body.schema not in components:
        return [f"{key}: {what} schema {body.schema} is missing"]
    props = _properties(spec, components[body.schema])
    return [
        f"{key}: {what} field {body.schema}.{f} is missing"
        for f in body.fields
        if f not in props
    ]
