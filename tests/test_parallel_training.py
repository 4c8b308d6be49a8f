"""Training across processes: the launcher, data and tensor parallelism against one process, and failures."""

from __future__ import annotations

import multiprocessing
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

from transformer_book import parallel_training as parallel

SETUP = parallel.ParallelSetup(d_model=16, num_heads=2, num_layers=1, d_ff=32, context=8, batch_size=4)


def fail_on_rank_one(rank: int, world_size: int) -> dict[str, Any]:
    """Both ranks meet, then rank 1 raises while rank 0 waits for it at a second barrier."""
    dist.barrier()
    if rank == 1:
        raise RuntimeError(f"rank {rank} of {world_size} failed on purpose")
    dist.barrier()
    return {}


def relative(ours: torch.Tensor, reference: torch.Tensor) -> float:
    reference = reference.detach()
    return float((ours - reference).norm() / reference.norm())


def test_data_parallel_gradients_equal_one_process_on_the_whole_batch() -> None:
    ranks = parallel.launch(parallel.data_parallel_step, 2, SETUP)
    single = SETUP.model()
    inputs, targets = SETUP.batch()
    parallel.language_model_loss(single(inputs), targets).backward()
    names = [name for name, _ in single.named_parameters()]
    # One norm over all the gradients: the key bias's is zero in exact arithmetic (a shift of every
    # key by the same vector leaves the softmax alone), so on its own it is pure rounding.
    reference = torch.cat([parameter.grad.flatten() for parameter in single.parameters() if parameter.grad is not None])
    for rank in ranks:
        assert relative(torch.cat([rank["gradients"][name].flatten() for name in names]), reference) < 1e-5
    parameters = sum(parameter.numel() for parameter in single.parameters())
    assert ranks[0]["bytes all-reduced"] == 4 * parameters


def test_tensor_parallel_feed_forward_equals_the_unsplit_layer_forward_and_backward() -> None:
    ranks = parallel.launch(parallel.tensor_parallel_feed_forward, 2, SETUP)
    full, x, upstream = parallel.feed_forward_and_input(SETUP)
    x.requires_grad_(True)
    output = full(x)
    output.backward(upstream)
    assert x.grad is not None and full.linear_1.weight.grad is not None and full.linear_2.weight.grad is not None
    half = SETUP.d_ff // 2
    for rank, result in enumerate(ranks):
        hidden = slice(rank * half, (rank + 1) * half)
        assert relative(result["output"], output) < 1e-5
        assert relative(result["input gradient"], x.grad) < 1e-5
        assert relative(result["gradients"]["linear_1.weight"], full.linear_1.weight.grad[hidden]) < 1e-5
        assert relative(result["gradients"]["linear_2.weight"], full.linear_2.weight.grad[:, hidden]) < 1e-5


def test_a_failed_rank_fails_the_launch_with_its_traceback_and_leaves_no_process() -> None:
    with pytest.raises(parallel.RankFailed, match=r"(?s)rank-1 failed first \(at .*rank 1 of 2 failed on purpose"):
        parallel.launch(fail_on_rank_one, 2)
    assert multiprocessing.active_children() == []


def test_launch_refuses_a_worker_that_a_new_process_cannot_import() -> None:
    def worker(rank: int, world_size: int) -> dict[str, Any]:
        return {}

    worker.__module__ = "__main__"
    with pytest.raises(ValueError, match="defined in __main__"):
        parallel.launch(worker, 2)
    with pytest.raises(ValueError, match="world_size"):
        parallel.launch(parallel.data_parallel_step, 0, SETUP)


def test_splits_that_do_not_divide_evenly_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="out_features=6 must be divisible by world_size=4"):
        parallel.ColumnParallelLinear(nn.Linear(4, 6), 0, 4)
    with pytest.raises(ValueError, match="in_features=6 must be divisible by world_size=4"):
        parallel.RowParallelLinear(nn.Linear(6, 4), 0, 4)
    with pytest.raises(ValueError, match="batch_size=4 must be divisible by world_size=3"):
        SETUP.rows_of(0, 3)


def test_the_ring_all_reduce_sends_two_times_w_minus_one_over_w_of_the_tensor() -> None:
    assert parallel.all_reduce_bytes(1000, 1) == 0
    assert parallel.all_reduce_bytes(1000, 2) == 4000
    assert parallel.all_reduce_bytes(1000, 4, bytes_per_element=2) == 3000
    ledger = parallel.communication_per_step(1000, world_size=2, tokens=10, d_model=4, sublayers=3)
    assert ledger["data parallel"] == 4000
    assert ledger["ZeRO-3 (weights gathered twice)"] == 6000
    assert ledger["tensor parallel"] == 2 * 3 * 10 * 4 * 4
    # an inner stage sends its output and receives its gradient: tokens x d_model each way
    assert ledger["pipeline (stage boundaries)"] == 2 * 10 * 4 * 4
    assert parallel.communication_per_step(1000, world_size=1, tokens=10, d_model=4, sublayers=3) == dict.fromkeys(
        ledger, 0.0
    )


def test_fully_sharded_step_shards_everything_and_takes_the_one_process_step() -> None:
    ranks = parallel.launch(parallel.fully_sharded_step, 2, SETUP)
    single = SETUP.model()
    parameters = dict(single.named_parameters())
    count = sum(parameter.numel() for parameter in single.parameters())
    for what, bytes_per_parameter in (("weights", 4), ("gradients", 4), ("Adam's moments", 8)):
        held = [rank["bytes held"][what] for rank in ranks]
        assert sum(held) == bytes_per_parameter * count, what
        assert max(held) <= 0.6 * bytes_per_parameter * count, what  # about half each
    inputs, targets = SETUP.batch()
    parallel.language_model_loss(single(inputs), targets).backward()
    reference = torch.cat([parameter.grad.flatten() for parameter in parameters.values()])  # type: ignore[union-attr]
    for rank in ranks:
        assert relative(torch.cat([rank["gradients"][name].flatten() for name in parameters]), reference) < 1e-5
    # The sharded Adam step equals an unsharded Adam step from the same (gathered) gradient.
    for name, parameter in parameters.items():
        parameter.grad = ranks[0]["gradients"][name].clone()
    torch.optim.Adam(single.parameters(), lr=SETUP.learning_rate).step()
    for rank in ranks:
        for name, parameter in parameters.items():
            torch.testing.assert_close(rank["weights"][name], parameter.detach(), msg=name)


@pytest.mark.parametrize("schedule", parallel.PIPELINE_SCHEDULES)
@pytest.mark.parametrize("stages", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("micro_batches", [1, 2, 3, 8, 16])
def test_the_simulated_pipeline_idles_the_fraction_the_formula_gives(
    schedule: str, stages: int, micro_batches: int
) -> None:
    grid = parallel.pipeline_schedule(stages, micro_batches, schedule)
    assert parallel.idle_fraction(grid) == pytest.approx(parallel.pipeline_bubble(stages, micro_batches), abs=1e-12)
    assert all(len(row) == 2 * (micro_batches + stages - 1) for row in grid)
    # every stage runs each pass of each micro-batch exactly once, a forward before its backward
    for row in grid:
        passes = [cell for cell in row if cell is not None]
        assert sorted(passes) == sorted((kind, i) for kind in "FB" for i in range(micro_batches))
        assert all(passes.index(("F", i)) < passes.index(("B", i)) for i in range(micro_batches))
    # a forward pass follows the previous stage's, a backward pass the next stage's
    start = {(stage, cell): step for stage, row in enumerate(grid) for step, cell in enumerate(row) if cell}
    for (stage, (kind, i)), step in start.items():
        if kind == "F" and stage > 0:
            assert step > start[(stage - 1, ("F", i))]
        if kind == "B" and stage < stages - 1:
            assert step > start[(stage + 1, ("B", i))]
    expected = (
        [micro_batches] * stages if schedule == "GPipe" else [min(micro_batches, stages - s) for s in range(stages)]
    )
    assert parallel.activations_held(grid) == expected


def test_the_bubble_formula_on_known_values() -> None:
    assert parallel.pipeline_bubble(1, 7) == 0
    assert parallel.pipeline_bubble(4, 12) == pytest.approx(0.2)
    assert parallel.pipeline_bubble(8, 1) == pytest.approx(7 / 8)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: parallel.pipeline_bubble(4, 0), "micro_batches"),
        (lambda: parallel.pipeline_bubble(0, 4), "stages"),
        (lambda: parallel.pipeline_schedule(4, 0), "micro_batches"),
        (lambda: parallel.pipeline_schedule(2.5, 4), "stages"),  # type: ignore[arg-type]
        (lambda: parallel.pipeline_schedule(4, 4, "interleaved"), "schedule"),
    ],
)
def test_the_pipeline_refuses_bad_input_by_name(call: Any, name: str) -> None:
    with pytest.raises(ValueError, match=rf"\b{name}="):
        call()


def _tensors(value: Any) -> list[torch.Tensor]:
    """Every tensor in value, however nested in dicts, lists and tuples."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [tensor for item in value.values() for tensor in _tensors(item)]
    if isinstance(value, (list, tuple)):
        return [tensor for item in value for tensor in _tensors(item)]
    return []


# The fake process group and ZeroRedundancyOptimizer, imported in this process, script a few functions
# with torch.jit, which PyTorch 2.13 deprecates; the workers themselves use neither.
@pytest.mark.filterwarnings("ignore:`torch.jit.(script|interface)` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("rank", [0, 1])
@pytest.mark.parametrize(
    "worker", [parallel.data_parallel_step, parallel.sharded_optimizer_step, parallel.tensor_parallel_feed_forward]
)
def test_every_worker_computes_and_communicates_on_its_ranks_device(
    worker: parallel.Worker, rank: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What NCCL needs, checked on the CPU: each rank's model, batch and every tensor it hands to a
    collective on the rank's device. The meta device stands in for cuda:rank, and the fake process
    group for NCCL, in this process; a tensor left on the CPU is caught at the collective it reaches,
    or in what the worker returns."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.testing._internal.distributed.fake_pg import FakeStore

    device = torch.device("meta")
    monkeypatch.setattr(parallel, "rank_device", lambda rank: device)
    # DDP compares the ranks' parameter shapes with .item(), which a meta tensor does not have.
    monkeypatch.setattr(torch.nn.parallel.distributed, "_verify_param_shape_across_processes", lambda *args: None)
    collected: list[tuple[str, torch.device]] = []

    def recording(name: str, collective: Any) -> Any:
        def wrapped(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            collected.append((name, tensor.device))
            return collective(tensor, *args, **kwargs)

        return wrapped

    monkeypatch.setattr(dist, "all_reduce", recording("all_reduce", dist.all_reduce))
    monkeypatch.setattr(dist, "broadcast", recording("broadcast", dist.broadcast))

    def bucket_all_reduce(process_group: Any, bucket: Any) -> torch.futures.Future[torch.Tensor]:
        # the fake group's futures carry no value, which DDP refuses: hand back the bucket as it is
        collected.append(("DDP's bucket all-reduce", bucket.buffer().device))
        future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        future.set_result(bucket.buffer())
        return future

    monkeypatch.setattr(default_hooks, "allreduce_hook", bucket_all_reduce)
    # DDP's own all-reduce (no hook) runs in C++ and would meet the same valueless future: every
    # replica gets a hook at once, the bucket all-reduce above or the one its worker registers.
    replicate = parallel._replicate

    def replicate_with_hook(model: nn.Module, where: torch.device) -> Any:
        replica = replicate(model, where)
        slot: dict[str, Any] = {"hook": bucket_all_reduce, "state": None}
        replica.register_comm_hook(slot, lambda slot, bucket: slot["hook"](slot["state"], bucket))
        replica.register_comm_hook = lambda state, hook: slot.update(hook=hook, state=state)  # type: ignore[method-assign]
        return replica

    monkeypatch.setattr(parallel, "_replicate", replicate_with_hook)
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=2)
    try:
        result = worker(rank, 2, SETUP)
    finally:
        dist.destroy_process_group()
    assert collected, "the worker reached no collective"
    assert [(name, where) for name, where in collected if where != device] == []
    returned = [tensor for tensor in _tensors(result) if tensor.dim() > 0]
    assert returned and all(tensor.device == device for tensor in returned), {t.device for t in returned}
