"""MatMul's gradient: an N-D operand times a matrix is differentiated as GEMMs over row views
(no Transpose copy, batched MatMul or SumToShape), the broadcasting batched case as before;
both checked against finite differences in float64 and against PyTorch autograd."""
import numpy as np
import pytest

from minitrain import Executor, Graph, run_node
from minitrain.autodiff import build_gradient_graph
from minitrain.gradcheck import gradcheck, gradcheck_graph
from minitrain.scheduler import schedule

ROWS_TIMES_MATRIX = [((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (4, 2)), ((5, 4), (4, 3))]
BROADCAST_BATCHES = [((2, 3, 4), (2, 4, 5)), ((1, 3, 4), (2, 4, 5)), ((2, 1, 2, 3), (3, 3, 2)), ((3, 4), (2, 4, 5))]


def matmul_graph(a_shape, b_shape, dtype=np.float64):
    """loss = sum(MatMul(a, w) * c), with c a fixed random weighting of Y."""
    rng = np.random.default_rng(1)
    g = Graph(name="matmul")
    g.add_input("a", dtype, a_shape)
    g.add_initializer("w", rng.standard_normal(b_shape).astype(dtype))
    y = g.add_node("MatMul", ["a", "w"])
    y_shape = np.matmul(np.zeros(a_shape), np.zeros(b_shape)).shape
    g.add_initializer("c", rng.standard_normal(y_shape).astype(dtype))
    g.outputs.append(g.add_node("ReduceSum", [g.add_node("Mul", [y, "c"])], attrs={"keepdims": 0}))
    return g


@pytest.mark.parametrize("a_shape,b_shape", ROWS_TIMES_MATRIX + BROADCAST_BATCHES)
def test_matmul_gradient_matches_finite_differences(rng, a_shape, b_shape):
    gradcheck("MatMul", [rng.standard_normal(a_shape), rng.standard_normal(b_shape)])


@pytest.mark.parametrize("a_shape,b_shape", ROWS_TIMES_MATRIX[:2])
def test_rows_times_matrix_gradient_is_two_gemms_on_row_views(a_shape, b_shape):
    g = matmul_graph(a_shape, b_shape)
    full, _ = build_gradient_graph(g, g.outputs[0], ["a", "w"])
    emitted = [n.op_type for n in full.nodes if n.name.startswith(g.nodes[0].name + "_")]
    assert sorted(emitted) == ["Gemm", "Gemm", "Reshape", "Reshape", "Reshape"]


@pytest.mark.parametrize("a_shape", [("N", 3, 4), ("N", "M", 4)])
def test_rows_times_matrix_gradient_with_a_symbolic_batch(rng, a_shape):
    """A's leading dims unknown until run time: dA is reshaped to a -1 for the one unknown dim,
    or to A's shape read by a Shape node for several."""
    g = Graph(name="matmul_symbolic")
    g.add_input("a", np.float64, a_shape)
    g.add_initializer("w", rng.standard_normal((4, 5)))
    g.outputs.append(g.add_node("ReduceSum", [g.add_node("MatMul", ["a", "w"])], attrs={"keepdims": 0}))
    gradcheck_graph(g, {"a": rng.standard_normal((2, 3, 4))}, ["a", "w"])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("a_shape,b_shape", ROWS_TIMES_MATRIX + BROADCAST_BATCHES)
def test_matmul_gradient_matches_torch(rng, dtype, a_shape, b_shape):
    torch = pytest.importorskip("torch")
    g = matmul_graph(a_shape, b_shape, dtype)
    full, grads = build_gradient_graph(g, g.outputs[0], ["a", "w"])
    a = rng.standard_normal(a_shape).astype(dtype)
    out = Executor(schedule(full, [grads["a"], grads["w"]])).run({"a": a})
    ta = torch.tensor(a, requires_grad=True)
    tw = torch.tensor(g.initializers["w"], requires_grad=True)
    (torch.matmul(ta, tw) * torch.tensor(g.initializers["c"])).sum().backward()
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out[grads["a"]], ta.grad.numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(out[grads["w"]], tw.grad.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rows_times_matrix_forward_reads_non_contiguous_views(rng, dtype):
    a = rng.standard_normal((3, 5, 4)).astype(dtype).transpose(1, 0, 2)
    b = rng.standard_normal((6, 4)).astype(dtype).T
    np.testing.assert_allclose(run_node("MatMul", [a, b])[0], np.matmul(a, b), rtol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("b_shape", [(8, 16), (16, 8)])
def test_gemm_by_a_transposed_narrow_matrix(rng, dtype, b_shape):
    """dX = dY W^T of a Linear: the kernel multiplies by a transposed copy of the small W."""
    dy = rng.standard_normal((1024, b_shape[1])).astype(dtype)
    w = rng.standard_normal(b_shape).astype(dtype)
    (y,) = run_node("Gemm", [dy, w], attrs={"transB": 1, "alpha": 0.5}, opset=13)
    np.testing.assert_allclose(y, 0.5 * dy @ w.T, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5)


@pytest.mark.cuda
@pytest.mark.parametrize("a_shape,b_shape", ROWS_TIMES_MATRIX[:2] + BROADCAST_BATCHES[:1])
def test_matmul_gradient_on_cuda_matches_the_cpu(rng, a_shape, b_shape):
    """The same gradient graph on CUDA (Reshape views, cuBLAS Gemm), against the CPU's and
    finite differences."""
    gradcheck("MatMul", [rng.standard_normal(a_shape), rng.standard_normal(b_shape)], provider="cuda")
