"""kvlab.Backend: the front door's operations from Python, with C++'s checks and errors."""
import pytest

import kvlab


def test_paged_admit_grow_fork_release_and_the_breakdown():
    b = kvlab.Backend("paged-16", model="llama-3-8b", capacity_gib=1)
    assert b.name == "paged-b16" and b.num_sequences == 0
    b.admit(1, prompt_tokens=40, final_tokens=100)
    b.grow(1, 9)
    assert b.length(1) == 49
    bd = b.breakdown()
    per_token = 128 * 1024  # llama-3-8b: 32 layers x 8 KV heads x 128 dims x 2 (K, V) x 2 bytes
    assert bd["token_states_bytes"] == 49 * per_token
    # 4 blocks of 16: the 15 slots left in the last one are reserved (the sequence will fill them)
    assert bd["reserved_bytes"] == (4 * 16 - 49) * per_token and bd["internal_fragmentation_bytes"] == 0
    b.admit(3, prompt_tokens=49)  # one that ends here: its last block's tail is internal fragmentation
    assert b.breakdown()["internal_fragmentation_bytes"] == (4 * 16 - 49) * per_token
    b.release(3)
    assert sum(bd[k] for k in ("token_states_frac", "reserved_frac", "internal_fragmentation_frac",
                                "external_fragmentation_frac", "free_frac")) == pytest.approx(1.0)
    b.fork(1, 2)  # shares the blocks: no new token states until the child writes
    assert b.breakdown()["token_states_bytes"] == 49 * per_token
    b.grow(2, 1)
    b.release(1)
    b.release(2)
    assert b.num_sequences == 0 and b.breakdown()["free_frac"] == 1.0


def test_out_of_memory_is_its_own_exception_and_changes_nothing():
    b = kvlab.Backend("contiguous-max", model="llama-3-8b", capacity_gib=1)
    assert b.can_admit(100, final_tokens=8192)
    b.admit(1, 100, final_tokens=8192)  # reserves the model's max context: 8192 x 128 KiB = 1 GiB
    before = b.breakdown()
    assert not b.can_admit(10)
    with pytest.raises(kvlab.OutOfMemory) as e:
        b.admit(2, 10)
    assert isinstance(e.value, MemoryError)
    assert b.breakdown() == before and not b.contains(2)


def test_misuse_raises_invalid_argument():
    b = kvlab.Backend("vmm-64k", model="llama-3-8b", capacity_gib=1)
    b.admit(7, 10)
    with pytest.raises(kvlab.InvalidArgument, match="7"):
        b.admit(7, 10)
    with pytest.raises(kvlab.InvalidArgument):
        b.grow(99, 1)
    with pytest.raises(kvlab.InvalidArgument):
        kvlab.Backend("paged-0")
    with pytest.raises(kvlab.InvalidArgument, match="capacity_gib"):
        kvlab.Backend("paged-16", capacity_gib=0)


def test_prefix_lookups_and_swap():
    b = kvlab.Backend("paged-16-radix", model="llama-3-8b", capacity_gib=1)
    ids = list(range(1000, 1064))
    b.admit(1, 64, token_ids=ids)
    b.release(1)  # its full blocks stay cached
    assert b.cached_prefix_tokens(ids) >= 48
    assert b.cached_prefix_tokens(list(range(64))) == 0
    b.admit(2, 64, token_ids=ids)
    assert b.cached_tokens(2) >= 48 and b.prefix_cache_stats()["hits"] == b.cached_tokens(2)
    assert b.supports_swap
    b.swap_out(2)
    assert b.is_swapped(2) and b.can_swap_in(2)
    b.swap_in(2)
    assert not b.is_swapped(2)


def test_every_family_builds_from_python():
    for form in ("contiguous-pow2", "paged-32-hash", "vmm-2m", "elastic-16"):
        b = kvlab.Backend(form, model="llama-3-8b", capacity_gib=1)
        b.admit(1, 500)
        assert b.breakdown()["token_states_bytes"] == 500 * 128 * 1024
        b.release(1)
    assert any(f.startswith("elastic-") for f in kvlab.backend_families())
    assert "llama-3-8b" in kvlab.models()
