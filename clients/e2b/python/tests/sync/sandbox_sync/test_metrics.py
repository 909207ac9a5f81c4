import datetime
import time

import pytest


def poll(fn):
    got = []
    for _ in range(60):
        got = fn()
        if len(got) > 0:
            break
        time.sleep(0.5)
    return got


@pytest.mark.skip_debug()
@pytest.mark.microvm
def test_sbx_metrics(sandbox_factory) -> None:
    sbx = sandbox_factory(timeout=60)
    metrics = poll(sbx.get_metrics)
    assert len(metrics) > 0
    m = metrics[0]
    for value in (m.cpu_count, m.cpu_used_pct, m.mem_used, m.mem_total, m.disk_used, m.disk_total):
        assert value is not None


@pytest.mark.skip_debug()
def test_sbx_metrics_time_range(sandbox_factory) -> None:
    start = datetime.datetime.now(datetime.timezone.utc)
    sbx = sandbox_factory(timeout=60)
    end = start

    def sample():
        nonlocal end
        end = datetime.datetime.now(datetime.timezone.utc)
        return sbx.get_metrics(start=start, end=end)

    metrics = poll(sample)
    assert len(metrics) > 0
    slack = 10  # upstream's: samples are aligned to buckets, the query is whole seconds
    for m in metrics:
        assert m.timestamp.timestamp() >= start.timestamp() - slack
        assert m.timestamp.timestamp() <= end.timestamp() + slack
    before = sbx.get_metrics(
        start=start - datetime.timedelta(hours=1), end=start - datetime.timedelta(minutes=30)
    )
    assert len(before) == 0
