"""The container test's clients: kiln.v1 stubs generated at test time, a gRPC client of the
published port (Predict, streamed LoadModel), the convolution model whose build the engine
cache saves, and the Predict check. Imported once grpc, numpy and onnx are known to be there.
"""
import glob
import os
import sys

import grpc
import numpy as np

from docker_env import check, sh


def make_stubs(tmp, src):
    """kiln.v1's Python modules, generated from SOURCE_DIR's protos into tmp/stubs."""
    stubs = os.path.join(tmp, "stubs")
    os.makedirs(stubs)
    protos = sorted(glob.glob(os.path.join(src, "proto/kiln/v1/*.proto")))
    sh([sys.executable, "-m", "grpc_tools.protoc", "-I" + os.path.join(src, "proto"),
        "--python_out=" + stubs, "--grpc_python_out=" + stubs] + protos)
    sys.path.insert(0, stubs)
    from kiln.v1 import inference_pb2, inference_pb2_grpc, model_pb2, model_pb2_grpc, tensor_pb2
    return inference_pb2, inference_pb2_grpc, model_pb2, model_pb2_grpc, tensor_pb2


def convnet_onnx(path):
    """8 convolutions (64 channels, 96x96): compiling it and the warm-up check take seconds,
    which is what the engine cache saves on a restart."""
    from onnx import TensorProto, checker, helper, numpy_helper, save
    rng = np.random.default_rng(7)
    nodes, inits, prev, cin = [], [], "x", 3
    for i in range(8):
        w = (rng.standard_normal((64, cin, 3, 3)) * np.sqrt(2 / (cin * 9))).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"),
                  numpy_helper.from_array(np.zeros(64, np.float32), f"b{i}")]
        nodes += [helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1] * 4),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        prev, cin = f"r{i}", 64
    inits.append(numpy_helper.from_array(
        (rng.standard_normal((64, 10)) * 0.1).astype(np.float32), "fw"))
    nodes += [helper.make_node("GlobalAveragePool", [prev], ["g"]),
              helper.make_node("Flatten", ["g"], ["f"]),
              helper.make_node("MatMul", ["f", "fw"], ["m"]),
              helper.make_node("Softmax", ["m"], ["probs"], axis=1)]
    g = helper.make_graph(nodes, "convnet",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 96, 96])],
                          [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", 10])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    checker.check_model(m)
    save(m, path)


class Client:
    def __init__(self, target, pb):
        self.pb, self.rpc, self.mpb, self.mrpc, self.tpb = pb
        self.channel = grpc.insecure_channel(target)
        self.infer = self.rpc.InferenceServiceStub(self.channel)
        self.models = self.mrpc.ModelServiceStub(self.channel)

    def tensor(self, a):
        return self.tpb.Tensor(dtype=self.tpb.DATA_TYPE_FLOAT, shape=a.shape,
                               raw_data=a.astype(np.float32).tobytes())

    def predict(self, model, x, timeout=30):
        out = self.infer.Predict(self.pb.PredictRequest(model=model, inputs={"x": self.tensor(x)}),
                                 timeout=timeout)
        t = out.outputs["probs"]
        return np.frombuffer(t.raw_data, np.float32).reshape(list(t.shape))

    def upload(self, name, data, config_yaml):
        def chunks():
            yield self.mpb.LoadModelChunk(name=name, config_yaml=config_yaml, data=data[:1 << 18])
            for i in range(1 << 18, len(data), 1 << 18):
                yield self.mpb.LoadModelChunk(data=data[i:i + (1 << 18)])
        return self.models.LoadModel(chunks(), timeout=600).model

    def close(self):
        self.channel.close()


def check_predict(client, model, cols_in, shape_in, cols_out):
    x = np.random.default_rng(1).random((2, *shape_in)).astype(np.float32)
    y = client.predict(model, x)
    check(y.shape == (2, cols_out) and np.allclose(y.sum(axis=1), 1, atol=1e-4),
          f"Predict {model} through the published gRPC port: {y.shape}, rows sum to 1")
