"""The compiled steps of Module and Optimizer: an artifact's graph whose parameter, gradient and
optimizer-state inputs become initializers bound to the CheckpointState's own tensors, fused
and scheduled once on the device, and run by an Executor that captures the step (a CUDA Graph
replayed after warm-up; the step arena on the CPU), as a TrainingSession runs its plans.

The state's tensors then never travel through the host: the kernels read them where they live
and the in-place updates (InPlaceAccumulatorV2, the optimizers) write them there.  A state
tensor that only a host kernel reads (a node the device has no kernel for) stays a graph input,
fed from the state on every run, so that it is never read stale.
"""
from __future__ import annotations

from ...executor import Executor
from ...fusion import fuse as fuse_graph
from ...providers import provider_list
from ...scheduler import schedule


class StateTensors:
    """Tensors of a CheckpointState under the names a compiled graph gives them, served to an
    Executor as its `state` (the interface of training/state.DeviceState): its initializers
    are these tensors themselves, never copies; the model's own constants are made from the
    graph's arrays."""

    def __init__(self, provider, tensors):
        self.provider = provider
        self._tensors = dict(tensors)

    def native(self, name, array=None):
        """The state's tensor named `name`, or a tensor made once from `array` (a constant)."""
        if name not in self._tensors:
            self._tensors[name] = self.provider.from_numpy(array)
        return self._tensors[name]

    def __contains__(self, name):
        return name in self._tensors


class CompiledStep:
    """`graph` run on `provider` (the Module's) for `fetch`, with the graph inputs named in
    `tensors` (name -> the state's tensor) bound to those tensors; `write_back` maps outputs to
    the state tensors they overwrite after each run; `capture` turns capture off when False."""

    def __init__(self, graph, fetch, provider, tensors, write_back=None, capture=True):
        self.provider = provider
        providers = tuple(provider_list(provider.name))
        bound = dict(tensors)
        plan = self._plan(graph, fetch, providers, bound)
        foreign = [name for name in bound if plan.locations.get(name, provider.name) != provider.name]
        if foreign:
            for name in foreign:
                del bound[name]
            plan = self._plan(graph, fetch, providers, bound)
        self.fed = {name: tensors[name] for name in foreign}
        self.executor = Executor(plan, state=StateTensors(provider, bound), providers={provider.name: provider},
                                 capture=capture, write_back=write_back)

    def _plan(self, graph, fetch, providers, bound):
        """The plan of `graph` with the inputs in `bound` turned into initializers (holding the
        state's values as they are now: the executor reads the tensors themselves)."""
        graph = graph.copy()
        graph.inputs = [v for v in graph.inputs if v.name not in bound]
        for name, tensor in bound.items():
            graph.add_initializer(name, self._host(tensor))
        return schedule(fuse_graph(graph, fetch, providers), fetch, providers)

    def _host(self, tensor):
        return tensor if self.provider.host_memory else self.provider.to_numpy(tensor)

    def run(self, feeds):
        """Run the step on the user's `feeds` (and the state tensors it is fed); the fetched
        values where they live (a captured step's: valid until the next run)."""
        return self.executor.run({**feeds, **self.fed}, to_host=False)

    @property
    def replay_stats(self):
        """The executor's capture counters (CUDA: warmups, records, captures, replays; CPU's
        step arena: warmups, traces, replays), empty where nothing is captured."""
        graphs = self.executor.graphs
        return dict(graphs.stats) if graphs is not None else {}
