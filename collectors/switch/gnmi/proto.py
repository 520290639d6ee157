"""gNMI protobuf/grpc stubs, from the maintained ``pygnmi`` wheel (gNMI spec 0.8.0) rather than a
copy compiled here: one place to upgrade, no protoc step in the build."""

from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc

__all__ = ["gnmi_pb2", "gnmi_pb2_grpc"]
