"""Writes the onnx-ir byte-exact round-trip fixtures with the reference `onnx` package.

Run once (python -m venv v && v/bin/pip install onnx numpy && v/bin/python make_fixtures.py);
the outputs are committed, so tests never need Python.
"""

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))


def attrs_model():
    """Many attribute kinds, subgraphs, symbolic dims, metadata, a function, sparse data."""
    then_g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["then_out"], name="then_id")],
        "then_branch",
        [],
        [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, ["batch", 4])],
    )
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["else_out"], name="else_neg")],
        "else_branch",
        [],
        [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, ["batch", 4])],
    )
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
            helper.make_node("Add", ["acc_in", "acc_in"], ["acc_out"], name="body_add"),
        ],
        "loop_body",
        [
            helper.make_tensor_value_info("iter", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, ["batch", 4]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, ["batch", 4]),
        ],
    )
    const_t = helper.make_tensor("c", TensorProto.FLOAT, [2], [0.5, -1.25])
    nodes = [
        helper.make_node("If", ["cond"], ["if_out"], name="if", then_branch=then_g, else_branch=else_g),
        helper.make_node("Loop", ["trip", "cond", "if_out"], ["loop_out"], name="loop", body=body),
        helper.make_node(
            "Custom",
            ["loop_out"],
            ["custom_out"],
            name="custom",
            domain="test.domain",
            doc_string="node doc",
            f=1.5,
            i=-7,
            s="text",
            t=const_t,
            floats=[1.0, 2.5, -3.0],
            ints=[-1, 0, 1 << 40],
            strings=["a", "bc"],
            tensors=[const_t, const_t],
            graphs=[then_g],
            tp=helper.make_tensor_type_proto(TensorProto.INT8, [3, "n"]),
        ),
        helper.make_node("MyFunc", ["custom_out"], ["y"], name="call", domain="local"),
    ]
    f16_raw = numpy_helper.from_array(np.array([1.0, -2.5, 65504.0], dtype=np.float16), "f16_raw")
    # make_tensor converts float values to float16 bit patterns in int32_data itself
    f16_typed = helper.make_tensor("f16_typed", TensorProto.FLOAT16, [2], [0.5, -1.0])
    i8_typed = helper.make_tensor("i8_typed", TensorProto.INT8, [3], [-128, 0, 127])
    u8_raw = numpy_helper.from_array(np.array([[0, 1], [254, 255]], dtype=np.uint8), "u8_raw")
    i64_typed = helper.make_tensor("i64_typed", TensorProto.INT64, [2], [-(1 << 62), 5])
    f32_typed = helper.make_tensor("f32_typed", TensorProto.FLOAT, [2, 2], [1.0, 2.0, 3.0, 4.0])
    dbl = helper.make_tensor("dbl", TensorProto.DOUBLE, [1], [3.141592653589793])
    strs = helper.make_tensor("strs", TensorProto.STRING, [2], [b"hello", b"world"])
    sparse = helper.make_sparse_tensor(
        helper.make_tensor("sp_values", TensorProto.FLOAT, [2], [5.0, 6.0]),
        helper.make_tensor("sp_indices", TensorProto.INT64, [2], [1, 3]),
        [4],
    )
    graph = helper.make_graph(
        nodes,
        "attrs_graph",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4]),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
            helper.make_tensor_value_info("trip", TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", None])],
        initializer=[f16_raw, f16_typed, i8_typed, u8_raw, i64_typed, f32_typed, dbl, strs],
        value_info=[helper.make_tensor_value_info("if_out", TensorProto.FLOAT, ["batch", 4])],
        doc_string="graph doc",
        sparse_initializer=[sparse],
    )
    func = helper.make_function(
        "local",
        "MyFunc",
        ["a"],
        ["b"],
        [helper.make_node("Relu", ["a"], ["b"], name="fn_relu")],
        [helper.make_opsetid("", 17)],
        attributes=["alpha"],
        doc_string="function doc",
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1), helper.make_opsetid("test.domain", 1)],
        functions=[func],
        producer_name="make_fixtures",
        producer_version="1",
        doc_string="model doc",
        ir_version=10,
    )
    helper.set_model_props(model, {"author": "qdq tests", "purpose": "round trip"})
    init_g = helper.make_graph(
        [helper.make_node("Constant", [], ["w0"], name="init_c", value=const_t)],
        "init",
        [],
        [helper.make_tensor_value_info("w0", TensorProto.FLOAT, [2])],
    )
    ti = onnx.TrainingInfoProto()
    ti.initialization.CopyFrom(init_g)
    ti.algorithm.CopyFrom(helper.make_graph([], "algo", [], []))
    b = ti.initialization_binding.add()
    b.key, b.value = "w0", "w0"
    model.training_info.append(ti)
    return model


def external_model():
    """A model whose large initializer lives in a side file, written by onnx's own saver."""
    w = numpy_helper.from_array(np.arange(600, dtype=np.float32).reshape(20, 30) / 7.0, "W")
    b = numpy_helper.from_array(np.array([1.0, 2.0], dtype=np.float32), "B")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")],
        "ext",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 20])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 30])],
        initializer=[w, b],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def main():
    onnx.save(attrs_model(), os.path.join(HERE, "attrs.onnx"))
    ext_dir = os.path.join(HERE, "external")
    os.makedirs(ext_dir, exist_ok=True)
    onnx.save_model(
        external_model(),
        os.path.join(ext_dir, "model.onnx"),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="model.onnx.data",
        size_threshold=1024,
    )


if __name__ == "__main__":
    main()
