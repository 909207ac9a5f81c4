import uuid
from datetime import timedelta

import pytest

from e2b import AsyncSandbox, SandboxQuery, SandboxState


def ids(items) -> list:
    return [s.sandbox_id for s in items]


def mine(test_id: str, **kw) -> SandboxQuery:
    return SandboxQuery(metadata={"sandbox_test_id": test_id}, **kw)


async def one_page(query, **kw):
    return await AsyncSandbox.list(query=query, **kw).next_items()


@pytest.mark.skip_debug()
async def test_list_sandboxes(async_sandbox: AsyncSandbox, sandbox_test_id: str):
    items = await one_page(mine(sandbox_test_id))
    assert len(items) >= 1
    assert async_sandbox.sandbox_id in ids(items)


@pytest.mark.skip_debug()
async def test_list_sandboxes_with_filter(sandbox_test_id: str, async_sandbox_factory):
    unique = str(uuid.uuid4())
    extra = await async_sandbox_factory(metadata={"unique_id": unique})
    items = await one_page(SandboxQuery(metadata={"unique_id": unique}))
    assert len(items) == 1
    assert items[0].sandbox_id == extra.sandbox_id


@pytest.mark.skip_debug()
async def test_list_running_sandboxes(async_sandbox: AsyncSandbox, sandbox_test_id: str):
    items = await one_page(mine(sandbox_test_id, state=[SandboxState.RUNNING]))
    assert len(items) >= 1
    assert any(s.sandbox_id == async_sandbox.sandbox_id and s.state == SandboxState.RUNNING for s in items)


@pytest.mark.skip_debug()
async def test_list_paused_sandboxes(async_sandbox: AsyncSandbox, sandbox_test_id: str):
    await async_sandbox.beta_pause()
    items = await one_page(mine(sandbox_test_id, state=[SandboxState.PAUSED]))
    assert len(items) >= 1
    assert any(s.sandbox_id == async_sandbox.sandbox_id and s.state == SandboxState.PAUSED for s in items)


async def two_pages(query):
    pages = AsyncSandbox.list(query=query, limit=1)
    first = await pages.next_items()
    assert len(first) == 1
    assert pages.has_next is True
    assert pages.next_token is not None
    second = await pages.next_items()
    assert len(second) == 1
    assert pages.has_next is False
    assert pages.next_token is None
    return first[0], second[0]


@pytest.mark.skip_debug()
async def test_paginate_running_sandboxes(async_sandbox: AsyncSandbox, async_sandbox_factory, sandbox_test_id: str):
    extra = await async_sandbox_factory(metadata={"sandbox_test_id": sandbox_test_id})
    a, b = await two_pages(mine(sandbox_test_id, state=[SandboxState.RUNNING]))
    assert a.state == SandboxState.RUNNING and a.sandbox_id == extra.sandbox_id
    assert b.state == SandboxState.RUNNING and b.sandbox_id == async_sandbox.sandbox_id


@pytest.mark.skip_debug()
async def test_paginate_paused_sandboxes(async_sandbox: AsyncSandbox, async_sandbox_factory, sandbox_test_id: str):
    await async_sandbox.beta_pause()
    extra = await async_sandbox_factory(metadata={"sandbox_test_id": sandbox_test_id})
    await extra.beta_pause()
    a, b = await two_pages(mine(sandbox_test_id, state=[SandboxState.PAUSED]))
    assert a.state == SandboxState.PAUSED and a.sandbox_id == extra.sandbox_id
    assert b.state == SandboxState.PAUSED and b.sandbox_id == async_sandbox.sandbox_id


@pytest.mark.skip_debug()
async def test_paginate_running_and_paused_sandboxes(
    async_sandbox: AsyncSandbox, async_sandbox_factory, sandbox_test_id: str
):
    extra = await async_sandbox_factory(metadata={"sandbox_test_id": sandbox_test_id})
    await extra.beta_pause()
    a, b = await two_pages(mine(sandbox_test_id, state=[SandboxState.RUNNING, SandboxState.PAUSED]))
    assert a.state == SandboxState.PAUSED and a.sandbox_id == extra.sandbox_id
    assert b.state == SandboxState.RUNNING and b.sandbox_id == async_sandbox.sandbox_id


@pytest.mark.skip_debug()
async def test_list_sandboxes_with_order(async_sandbox: AsyncSandbox, async_sandbox_factory, sandbox_test_id: str):
    extra = await async_sandbox_factory(metadata={"sandbox_test_id": sandbox_test_id})
    asc = await one_page(mine(sandbox_test_id), order="asc")
    assert len(asc) >= 2
    assert asc[0].sandbox_id == async_sandbox.sandbox_id
    assert asc[-1].sandbox_id == extra.sandbox_id
    desc = await one_page(mine(sandbox_test_id), order="desc")
    assert len(desc) >= 2
    assert desc[0].sandbox_id == extra.sandbox_id
    assert desc[-1].sandbox_id == async_sandbox.sandbox_id


@pytest.mark.skip_debug()
async def test_list_sandboxes_started_after(async_sandbox: AsyncSandbox, sandbox_test_id: str):
    started = (await async_sandbox.get_info()).started_at
    items = await one_page(mine(sandbox_test_id, started_after=started))
    assert async_sandbox.sandbox_id in ids(items)
    later = await one_page(mine(sandbox_test_id, started_after=started + timedelta(seconds=1)))
    assert async_sandbox.sandbox_id not in ids(later)


@pytest.mark.skip_debug()
async def test_list_sandboxes_with_template_filter(async_sandbox: AsyncSandbox, sandbox_test_id: str):
    template_id = (await async_sandbox.get_info()).template_id
    items = await one_page(mine(sandbox_test_id, template=template_id))
    assert async_sandbox.sandbox_id in ids(items)
    assert len(await one_page(mine(sandbox_test_id, template="unknown-template"))) == 0


@pytest.mark.skip_debug()
async def test_paginate_iterator(async_sandbox: AsyncSandbox, sandbox_test_id: str):
    pages = AsyncSandbox.list(query=mine(sandbox_test_id))
    seen = []
    while pages.has_next:
        seen.extend(await pages.next_items())
    assert len(seen) > 0
    assert async_sandbox.sandbox_id in ids(seen)
