"""The watch cache and its resync (service/operator/watch_cache.py)."""

from __future__ import annotations

from seedrl.service.operator.render.common import LABEL_EXPERIMENT

NS = "team-a"


def test_a_resync_keeps_what_the_watch_delivered_after_the_list_was_taken():
    from seedrl.service.operator.watch_cache import ChildCache

    def obj(name, uid, rv):
        labels = {LABEL_EXPERIMENT: "x"}
        return {
            "metadata": {
                "namespace": NS,
                "name": name,
                "uid": uid,
                "resourceVersion": rv,
                "labels": labels,
            }
        }

    def held():
        return {
            p["metadata"]["name"]: p["metadata"]["resourceVersion"]
            for p in cache.observed(NS, "x").pods
        }

    cache = ChildCache()
    for name in ("stays", "gone", "deleted-during", "changed-during"):
        cache.update("Pod", None, obj(name, f"{name}-1", "1"))
    since = cache.mark()
    # The list call runs; meanwhile the watch delivers these.
    listed = [
        obj("stays", "stays-1", "5"),
        obj("deleted-during", "deleted-during-1", "1"),
        obj("changed-during", "changed-during-1", "1"),
    ]
    cache.update("Pod", "ADDED", obj("new-during", "new-during-1", "7"))
    cache.update("Pod", "DELETED", obj("deleted-during", "deleted-during-1", "8"))
    cache.update("Pod", "MODIFIED", obj("changed-during", "changed-during-1", "9"))
    dropped = cache.replace("Pod", listed, since)
    assert [o["metadata"]["name"] for o in dropped] == ["gone"]
    # The listing's version of what no event touched; the watch's of the rest.
    assert held() == {"stays": "5", "new-during": "7", "changed-during": "9"}
    # A DELETED event of an older object of a name leaves the newer one held.
    cache.update("Pod", "ADDED", obj("stays", "stays-2", "10"))
    cache.update("Pod", "DELETED", obj("stays", "stays-1", "11"))
    assert held()["stays"] == "10"
    # The next resync starts afresh: what a later listing lacks goes.
    assert {o["metadata"]["name"] for o in cache.replace("Pod", [], cache.mark())} == {
        "stays",
        "new-during",
        "changed-during",
    }
