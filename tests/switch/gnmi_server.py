"""A real gRPC gNMI target, in-process, that replays recorded SubscribeResponses over the wire.

Only the switch OS is missing here, so the *responses* are recorded real ones; gRPC, HTTP/2, TLS
and protobuf encoding are all real. It records each Subscribe request it receives.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import AsyncIterator

import grpc

from fabricscope.collectors.switch.gnmi.proto import gnmi_pb2, gnmi_pb2_grpc


class ReplayTarget(gnmi_pb2_grpc.gNMIServicer):
    def __init__(self, responses: list[gnmi_pb2.SubscribeResponse], hold_open: bool = True,
                 models: tuple[str, ...] = ("openconfig-interfaces",),
                 by_target: dict[str, list[gnmi_pb2.SubscribeResponse]] | None = None) -> None:  # fmt: skip
        self.responses = responses
        self.models = models  # advertised in Capabilities
        self.by_target = by_target or {}  # a Subscribe whose prefix target is a key gets these instead
        self.hold_open = hold_open
        self.requests: list[gnmi_pb2.SubscribeRequest] = []
        self.metadata: list[dict[str, str]] = []
        self.connections = 0

    async def Capabilities(self, request, context):  # noqa: N802 (gRPC method name)
        return gnmi_pb2.CapabilityResponse(
            supported_encodings=[gnmi_pb2.JSON_IETF, gnmi_pb2.PROTO], gNMI_version="0.8.0",
            supported_models=[gnmi_pb2.ModelData(name=m, organization="test") for m in self.models],
        )  # fmt: skip

    async def Subscribe(self, request_iterator, context) -> AsyncIterator[gnmi_pb2.SubscribeResponse]:  # noqa: N802
        self.connections += 1
        self.metadata.append({k: v for k, v in context.invocation_metadata()})
        target = ""
        async for req in request_iterator:
            self.requests.append(req)
            target = req.subscribe.prefix.target
            break
        for r in self.by_target.get(target, self.responses):
            yield r
        yield gnmi_pb2.SubscribeResponse(sync_response=True)
        if self.hold_open:
            await asyncio.sleep(3600)


async def serve(target: ReplayTarget, tls: tuple[bytes, bytes] | None = None) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server()
    gnmi_pb2_grpc.add_gNMIServicer_to_server(target, server)
    if tls:
        creds = grpc.ssl_server_credentials([(tls[1], tls[0])])
        port = server.add_secure_port("127.0.0.1:0", creds)
    else:
        port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


def self_signed(hostname: str = "gnmi.test") -> tuple[bytes, bytes]:
    """(certificate PEM, private key PEM) for a throwaway TLS target."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostname)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(hostname)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())  # fmt: skip
    return cert.public_bytes(serialization.Encoding.PEM), key_pem
