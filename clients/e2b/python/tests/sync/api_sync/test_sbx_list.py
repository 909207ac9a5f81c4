import uuid
from datetime import timedelta

import pytest

from e2b import Sandbox, SandboxQuery, SandboxState


def ids(items) -> list:
    return [s.sandbox_id for s in items]


def mine(test_id: str, **kw) -> SandboxQuery:
    return SandboxQuery(metadata={"sandbox_test_id": test_id}, **kw)


@pytest.mark.skip_debug()
def test_list_sandboxes(sandbox: Sandbox, sandbox_test_id: str):
    items = Sandbox.list(query=mine(sandbox_test_id)).next_items()
    assert len(items) >= 1
    assert sandbox.sandbox_id in ids(items)


@pytest.mark.skip_debug()
def test_list_sandboxes_with_filter(sandbox_factory, sandbox_test_id: str):
    unique = str(uuid.uuid4())
    extra = sandbox_factory(metadata={"unique_id": unique})
    items = Sandbox.list(query=SandboxQuery(metadata={"unique_id": unique})).next_items()
    assert len(items) == 1
    assert items[0].sandbox_id == extra.sandbox_id


@pytest.mark.skip_debug()
def test_list_running_sandboxes(sandbox: Sandbox, sandbox_test_id: str):
    items = Sandbox.list(query=mine(sandbox_test_id, state=[SandboxState.RUNNING])).next_items()
    assert len(items) >= 1
    assert any(s.sandbox_id == sandbox.sandbox_id and s.state == SandboxState.RUNNING for s in items)


@pytest.mark.skip_debug()
def test_list_paused_sandboxes(sandbox: Sandbox, sandbox_test_id: str):
    sandbox.beta_pause()
    items = Sandbox.list(query=mine(sandbox_test_id, state=[SandboxState.PAUSED])).next_items()
    assert len(items) >= 1
    assert any(s.sandbox_id == sandbox.sandbox_id and s.state == SandboxState.PAUSED for s in items)


def two_pages(query: SandboxQuery):
    pages = Sandbox.list(query=query, limit=1)
    first = pages.next_items()
    assert len(first) == 1
    assert pages.has_next is True
    assert pages.next_token is not None
    second = pages.next_items()
    assert len(second) == 1
    assert pages.has_next is False
    assert pages.next_token is None
    return first[0], second[0]


@pytest.mark.skip_debug()
def test_paginate_running_sandboxes(sandbox: Sandbox, sandbox_factory, sandbox_test_id: str):
    extra = sandbox_factory(metadata={"sandbox_test_id": sandbox_test_id})
    a, b = two_pages(mine(sandbox_test_id, state=[SandboxState.RUNNING]))
    assert a.state == SandboxState.RUNNING and a.sandbox_id == extra.sandbox_id
    assert b.state == SandboxState.RUNNING and b.sandbox_id == sandbox.sandbox_id


@pytest.mark.skip_debug()
def test_paginate_paused_sandboxes(sandbox: Sandbox, sandbox_factory, sandbox_test_id: str):
    sandbox.beta_pause()
    extra = sandbox_factory(metadata={"sandbox_test_id": sandbox_test_id})
    extra.beta_pause()
    a, b = two_pages(mine(sandbox_test_id, state=[SandboxState.PAUSED]))
    assert a.state == SandboxState.PAUSED and a.sandbox_id == extra.sandbox_id
    assert b.state == SandboxState.PAUSED and b.sandbox_id == sandbox.sandbox_id


@pytest.mark.skip_debug()
def test_paginate_running_and_paused_sandboxes(sandbox: Sandbox, sandbox_factory, sandbox_test_id: str):
    extra = sandbox_factory(metadata={"sandbox_test_id": sandbox_test_id})
    extra.beta_pause()
    a, b = two_pages(mine(sandbox_test_id, state=[SandboxState.RUNNING, SandboxState.PAUSED]))
    assert a.state == SandboxState.PAUSED and a.sandbox_id == extra.sandbox_id
    assert b.state == SandboxState.RUNNING and b.sandbox_id == sandbox.sandbox_id


@pytest.mark.skip_debug()
def test_list_sandboxes_with_order(sandbox: Sandbox, sandbox_factory, sandbox_test_id: str):
    extra = sandbox_factory(metadata={"sandbox_test_id": sandbox_test_id})
    asc = Sandbox.list(query=mine(sandbox_test_id), order="asc").next_items()
    assert len(asc) >= 2
    assert asc[0].sandbox_id == sandbox.sandbox_id
    assert asc[-1].sandbox_id == extra.sandbox_id
    desc = Sandbox.list(query=mine(sandbox_test_id), order="desc").next_items()
    assert len(desc) >= 2
    assert desc[0].sandbox_id == extra.sandbox_id
    assert desc[-1].sandbox_id == sandbox.sandbox_id


@pytest.mark.skip_debug()
def test_list_sandboxes_started_after(sandbox: Sandbox, sandbox_test_id: str):
    started = sandbox.get_info().started_at
    items = Sandbox.list(query=mine(sandbox_test_id, started_after=started)).next_items()
    assert sandbox.sandbox_id in ids(items)
    later = Sandbox.list(
        query=mine(sandbox_test_id, started_after=started + timedelta(seconds=1))
    ).next_items()
    assert sandbox.sandbox_id not in ids(later)


@pytest.mark.skip_debug()
def test_list_sandboxes_with_template_filter(sandbox: Sandbox, sandbox_test_id: str):
    template_id = sandbox.get_info().template_id
    items = Sandbox.list(query=mine(sandbox_test_id, template=template_id)).next_items()
    assert sandbox.sandbox_id in ids(items)
    none = Sandbox.list(query=mine(sandbox_test_id, template="unknown-template")).next_items()
    assert len(none) == 0


@pytest.mark.skip_debug()
def test_paginate_iterator(sandbox: Sandbox, sandbox_test_id: str):
    pages = Sandbox.list(query=mine(sandbox_test_id))
    seen = []
    while pages.has_next:
        seen.extend(pages.next_items())
    assert len(seen) > 0
    assert sandbox.sandbox_id in ids(seen)
