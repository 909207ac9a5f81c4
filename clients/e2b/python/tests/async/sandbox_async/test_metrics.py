import asyncio
import datetime

import pytest


async def poll(fn):
    got = []
    for _ in range(60):
        got = await fn()
        if len(got) > 0:
            break
        await asyncio.sleep(0.5)
    return got


@pytest.mark.skip_debug()
async def test_sbx_metrics(async_sandbox_factory) -> None:
    sbx = await async_sandbox_factory(timeout=60)
    metrics = await poll(sbx.get_metrics)
    assert len(metrics) > 0
    m = metrics[0]
    for value in (m.cpu_count, m.cpu_used_pct, m.mem_used, m.mem_total, m.disk_used, m.disk_total):
        assert value is not None


@pytest.mark.skip_debug()
async def test_sbx_metrics_time_range(async_sandbox_factory) -> None:
    start = datetime.datetime.now(datetime.timezone.utc)
    sbx = await async_sandbox_factory(timeout=60)
    end = start

    async def sample():
        nonlocal end
        end = datetime.datetime.now(datetime.timezone.utc)
        return await sbx.get_metrics(start=start, end=end)

    metrics = await poll(sample)
    assert len(metrics) > 0
    slack = 10
    for m in metrics:
        assert m.timestamp.timestamp() >= start.timestamp() - slack
        assert m.timestamp.timestamp() <= end.timestamp() + slack
    before = await sbx.get_metrics(
        start=start - datetime.timedelta(hours=1), end=start - datetime.timedelta(minutes=30)
    )
    assert len(before) == 0
