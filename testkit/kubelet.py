"""A kubelet stand-in: the real pod-resources gRPC service on a unix socket, serving pods
the test sets, optionally slow or failing. Also bench/gpu/pod_standin.py's kubelet, and runnable
(``python -m testkit.kubelet SOCKET``) to serve the simulated node's pods."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

import grpc

from exporter.sources.kubernetes import podresources_pb2 as pb
from exporter.sources.kubernetes import podresources_pb2_grpc as pb_grpc

# container name -> [(resource name, [device ids])]
Containers = Mapping[str, Sequence[tuple[str, Sequence[str]]]]


# container name -> [(claim name, [(driver, pool, device name, [cdi ids], share id)])]
Claims = Mapping[str, Sequence[tuple[str, Sequence[tuple[str, str, str, Sequence[str], str]]]]]


def claim(
    name: str, namespace: str, devices: Sequence[tuple[str, str, str, Sequence[str], str]]
) -> pb.DynamicResource:
    """A DRA allocation as the kubelet lists it under ContainerResources.dynamic_resources."""
    return pb.DynamicResource(
        claim_name=name,
        claim_namespace=namespace,
        claim_resources=[
            pb.ClaimResource(
                driver_name=driver,
                pool_name=pool,
                device_name=device,
                cdi_devices=[pb.CDIDevice(name=c) for c in cdi],
                **({"share_id": share} if share else {}),
            )
            for driver, pool, device, cdi, share in devices
        ],
    )


def pod(
    namespace: str, name: str, containers: Containers, claims: Claims | None = None
) -> pb.PodResources:
    return pb.PodResources(
        name=name,
        namespace=namespace,
        containers=[
            pb.ContainerResources(
                name=cname,
                devices=[
                    pb.ContainerDevices(resource_name=res, device_ids=list(ids))
                    for res, ids in devices
                ],
                cpu_ids=[2, 3],
                dynamic_resources=[
                    claim(cl, namespace, devs) for cl, devs in (claims or {}).get(cname, ())
                ],
            )
            for cname, devices in {**{c: () for c in claims or {}}, **containers}.items()
        ],
    )


class KubeletStandIn(pb_grpc.PodResourcesListerServicer):
    def __init__(self) -> None:
        self.pods: list[pb.PodResources] = []
        self.allocatable: list[pb.ContainerDevices] = []
        self.delay = 0.0
        self.fail: grpc.StatusCode | None = None
        self.list_calls = 0

    async def List(
        self, request: pb.ListPodResourcesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListPodResourcesResponse:
        self.list_calls += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail is not None:
            await context.abort(self.fail, "injected failure")
        return pb.ListPodResourcesResponse(pod_resources=self.pods)

    async def GetAllocatableResources(
        self, request: pb.AllocatableResourcesRequest, context: grpc.aio.ServicerContext
    ) -> pb.AllocatableResourcesResponse:
        return pb.AllocatableResourcesResponse(devices=self.allocatable)


async def serve(path: str) -> tuple[grpc.aio.Server, KubeletStandIn]:
    server = grpc.aio.server()
    standin = KubeletStandIn()
    pb_grpc.add_PodResourcesListerServicer_to_server(standin, server)  # type: ignore[no-untyped-call]
    server.add_insecure_port(f"unix://{path}")
    await server.start()
    return server, standin


def simulated_node_pods() -> list[pb.PodResources]:
    """Pods holding the GPUs of ``--simulate`` (exporter/sim): 0 free, 4 time-sliced."""
    uuid = [f"GPU-5e1f0000-0000-4000-8000-{i:012d}" for i in range(8)]
    gpu = "nvidia.com/gpu"
    return [
        pod("research", "notebook", {"jupyter": [(gpu, [uuid[1]])]}),
        pod("ml", "trainer-0", {"main": [(gpu, [uuid[2]])]}),
        pod("infer", "llama-decode", {"vllm": [(gpu, [uuid[3]])]}),
        pod("infer", "embed-a", {"server": [("nvidia.com/gpu.shared", [f"{uuid[4]}::0"])]}),
        pod("infer", "embed-b", {"server": [("nvidia.com/gpu.shared", [f"{uuid[4]}::1"])]}),
        pod("ml", "tiny-kernels", {"main": [(gpu, [uuid[5]])]}),
        pod("ml", "trainer-1", {"main": [(gpu, [uuid[6], uuid[7]])]}),
    ]


async def _main(path: str) -> None:
    server, standin = await serve(path)
    standin.pods = simulated_node_pods()
    print(f"kubelet stand-in serving the simulated node's pods on unix://{path}", flush=True)
    await server.wait_for_termination()


if __name__ == "__main__":
    import sys

    asyncio.run(_main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/goodput-kubelet.sock"))
