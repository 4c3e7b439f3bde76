"""A tenant's own outbound allow list, set by the admin (trust issue, item 7): it opens what it
names for that tenant only, at create and at connect time, for external tools and MCP servers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import httpx
import pytest

from tests.support import functions
from tests.support.apps import (
    ADMIN,
    TenantCredentials,
    create_tenant,
    http_client,
    make_settings,
    running_app,
)
from tests.support.documents import external_tool
from tests.support.fixtures.mcp import demo_http  # noqa: F401 - a fixture: a real MCP server
from tests.support.mcp_demo import McpDemoServer
from tests.support.servers import ThreadedServer


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    # The operator allows nothing local, and opens only the web's ports.
    settings = make_settings(None, outbound_allow=[], outbound_ports="80,443")
    async with running_app(settings, functions.registry) as app, http_client(app) as client:
        yield client


def local_tool(url: str, tool_id: str = "intranet") -> dict[str, object]:
    return external_tool(
        tool_id,
        function={
            "name": tool_id,
            "description": "An internal API",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
            "url": url,
            "method": "GET",
        },
        context_parameters=[],
    )


async def set_allow(
    client: httpx.AsyncClient, tenant: str, allow: list[str], *, force: bool = False
) -> httpx.Response:
    body = {"allow": allow, "force": force}
    return await client.put(f"/tenants/{tenant}/outbound", json=body, headers=ADMIN)


async def test_admin_sets_reads_and_validates_a_tenants_list(client: httpx.AsyncClient) -> None:
    acme = await create_tenant(client, "acme")
    assert (await client.get("/tenants/acme/outbound", headers=ADMIN)).json() == {"allow": []}
    stored = await set_allow(client, "acme", ["wiki.intranet.example", "10.0.0.0/8:8443"] * 2)
    assert stored.status_code == 200
    assert stored.json() == {"allow": ["wiki.intranet.example", "10.0.0.0/8:8443"]}
    assert (await client.get("/tenants/acme/outbound", headers=ADMIN)).json() == stored.json()

    bad = await set_allow(client, "acme", ["ok.example", "1.1.1.1.1", "x:0", "10.0.0.0/33", "a b"])
    assert bad.status_code == 422
    paths = [error["path"] for error in bad.json()["errors"]]
    assert paths == ["$.allow[1]", "$.allow[2]", "$.allow[3]", "$.allow[4]"], bad.json()
    assert (await set_allow(client, "acme", [""])).status_code == 422
    assert (await client.get("/tenants/acme/outbound", headers=ADMIN)).json() == stored.json()

    assert (await set_allow(client, "nobody", [])).status_code == 404
    assert (await client.get("/tenants/nobody/outbound", headers=ADMIN)).status_code == 404
    # Only the admin: the tenant cannot widen its own list.
    own = await client.put("/tenants/acme/outbound", json={"allow": []}, headers=acme.headers)
    assert own.status_code == 403
    too_many = await set_allow(client, "acme", [f"h{i}.example" for i in range(101)])
    assert too_many.status_code == 422


async def test_a_list_opens_its_targets_for_that_tenant_only(
    client: httpx.AsyncClient, upstream: ThreadedServer
) -> None:
    acme, globex = await create_tenant(client, "acme"), await create_tenant(client, "globex")
    port = urlsplit(upstream.url).port
    url = f"{upstream.url}/echo"

    async def create(tenant: TenantCredentials) -> httpx.Response:
        return await client.post("/tools/create", json=local_tool(url), headers=tenant.headers)

    async def invoke(tenant: TenantCredentials) -> dict[str, object]:
        response = await client.post(
            "/tools/intranet/invoke", json={"arguments": {"q": "x"}}, headers=tenant.headers
        )
        assert response.status_code == 200, response.text
        return dict(response.json())

    # Without a port, the entry lifts the address rule only: the port is still closed.
    assert (await set_allow(client, "acme", ["127.0.0.1"], force=True)).status_code == 200
    refused = await create(acme)
    assert refused.status_code == 422 and f"port {port}" in refused.text
    # With the port, both: acme may create and call it...
    assert (await set_allow(client, "acme", [f"127.0.0.1:{port}"], force=True)).status_code == 200
    assert (await create(acme)).status_code == 201, (await create(acme)).text
    called = await invoke(acme)
    assert called["status"] == "ok" and '"method":"GET"' in str(called["content"]), called
    # ...globex may not (create time), even while acme's connection is open.
    other = await create(globex)
    assert other.status_code == 422 and "port" in other.text

    # Cleared: acme's stored tool is refused where it connects, at once on this replica.
    assert (await set_allow(client, "acme", [])).status_code == 200
    blocked = await invoke(acme)
    assert blocked["status"] == "error" and blocked["error"]["kind"] == "blocked", blocked  # type: ignore[index]


async def test_a_deleted_tenant_does_not_pass_its_list_to_a_new_one_with_its_id(
    client: httpx.AsyncClient, upstream: ThreadedServer
) -> None:
    port = urlsplit(upstream.url).port
    await create_tenant(client, "acme")
    assert (await set_allow(client, "acme", [f"127.0.0.1:{port}"], force=True)).status_code == 200
    assert (await client.delete("/tenants/acme", headers=ADMIN)).status_code == 204
    again = await create_tenant(client, "acme")
    assert (await client.get("/tenants/acme/outbound", headers=ADMIN)).json() == {"allow": []}
    created = await client.post(
        "/tools/create", json=local_tool(f"{upstream.url}/echo"), headers=again.headers
    )
    assert created.status_code == 422


async def test_a_tenants_mcp_server_on_an_allowed_local_address(
    client: httpx.AsyncClient,
    demo_http: McpDemoServer,  # noqa: F811 - the imported fixture
) -> None:
    acme, globex = await create_tenant(client, "acme"), await create_tenant(client, "globex")
    port = urlsplit(demo_http.url).port
    body = {"name": "local", "type": "streamable-http", "url": demo_http.url}
    assert (await set_allow(client, "acme", [f"127.0.0.1:{port}"], force=True)).status_code == 200
    created = await client.post("/mcp-servers", json=body, headers=acme.headers)
    assert created.status_code == 201, created.text
    listed = await client.get("/mcp-servers/local/tools", headers=acme.headers)
    assert listed.status_code == 200 and listed.json(), listed.text
    refused = await client.post("/mcp-servers", json=body, headers=globex.headers)
    assert refused.status_code == 422

    # Cleared: the stored server is refused where the session connects.
    assert (await set_allow(client, "acme", [])).status_code == 200
    cut = await client.get("/mcp-servers/local/tools", headers=acme.headers)
    assert cut.status_code == 502 and "local" in cut.json()["detail"], cut.text


@pytest.mark.parametrize(
    "entry",
    [
        "0.0.0.0/0",
        "::/0",
        "0.0.0.0/1",  # holds 0.0.0.0/8 and 127.0.0.0/8
        "0.0.0.0",
        "127.0.0.1",
        "127.0.0.0/8:8080",
        "::1",
        "[::1]:8080",
        "::/96",
        "::ffff:127.0.0.1",
        "::ffff:169.254.169.254",
        "169.254.169.254",
        "169.254.0.0/16:80",
        "fe80::/10",
        "localhost",
        "api.localhost:8080",
        "metadata.google.internal",
    ],
)
async def test_a_list_opens_loopback_link_local_or_everything_only_when_forced(
    client: httpx.AsyncClient, entry: str
) -> None:
    await create_tenant(client, "acme")
    refused = await set_allow(client, "acme", ["wiki.intranet.example", entry])
    assert refused.status_code == 422, refused.text
    [error] = refused.json()["errors"]
    assert error["path"] == "$.allow[1]" and '"force": true' in error["message"], error
    assert (await client.get("/tenants/acme/outbound", headers=ADMIN)).json() == {"allow": []}
    forced = await set_allow(client, "acme", [entry], force=True)
    assert forced.status_code == 200 and forced.json() == {"allow": [entry]}


async def test_private_networks_need_no_force(client: httpx.AsyncClient) -> None:
    await create_tenant(client, "acme")
    entries = ["10.0.0.0/8", "192.168.0.0/16:8443", "fd00::/8", "wiki.internal", "172.16.0.1"]
    assert (await set_allow(client, "acme", entries)).status_code == 200
