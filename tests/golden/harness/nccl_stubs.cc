/*
 * Stand-ins for what NCCL's host-side graph code reaches outside src/graph when it runs without a GPU,
 * without plugins and without the rest of libnccl. All are weak: where the NCCL sources the harness
 * compiles define a symbol themselves, theirs is used.
 *
 *  - CUDA runtime: debug.cc asks for the current device to print it in its prefix; there is none, say 0.
 *  - P2P and SHM transports (src/transport/p2p.cc, shm.cc): ncclTopoComputePaths asks whether two GPUs
 *    of the node can reach each other through either, and cuts GPUs off rank 0's domain when neither
 *    can (e.g. where NET beats the path between two PCIe GPUs on different CPUs). Their topology checks
 *    are redone here with NCCL's own ncclTopoCheckP2p/ncclTopoCheckNet; the CUDA checks that follow
 *    them there are taken as passing.
 *  - NVML P2P status (src/misc/nvmlwrap.cc): only read when NCCL_IGNORE_DISABLED_P2P is not 2, which the
 *    driver sets; fails loudly otherwise.
 *  - Net plugin version (ncclNetVersion, before 2.26): any version but 4 (v4 plugins disable PXN).
 *  - Environment plugin (init.cc ncclInitEnv, src/plugin/env; from 2.28): the default plugin, which
 *    reads the process environment.
 *
 * And one thing that is not a stand-in: debug.cc starts every line with "HOST:PID:TID [DEV] NCCL INFO "
 * in a 1024-byte buffer, and up to 2.28 formats the message into what is left of it, so the longest
 * lines (a ring through 72 GPUs) are cut at a length that depends on the host name and on how many
 * digits the process and thread ids have. The driver is linked with --wrap for gethostname, getpid and
 * syscall(SYS_gettid) so that the prefix is "nccl:1000:1000 [0] NCCL INFO " (29 characters, the length
 * it had where the goldens were first produced) on every machine.
 */
#include "comm.h"
#include "transport.h"
#include "nvmlwrap.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define WEAK __attribute__((weak))
#define AT_LEAST(major, minor) (NCCL_VERSION_CODE >= NCCL_VERSION(major, minor, 0))

extern "C" WEAK cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}

// An integer parameter as NCCL_PARAM reads it from the environment (misc/param.cc), for parameters
// defined in files this harness does not compile.
static int64_t envParam(const char* name, int64_t dflt) {
  const char* str = getenv(name);
  if (str == NULL || *str == '\0') return dflt;
  char* end;
  int64_t v = strtoll(str, &end, 0);
  return *end == '\0' ? v : dflt;
}

// The transports' canConnect takes the communicator from 2.23, the topology before.
#if AT_LEAST(2, 23)
#define CAN_CONNECT_ARGS \
  int *ret, struct ncclComm *comm, struct ncclTopoGraph *, struct ncclPeerInfo *info1, struct ncclPeerInfo *info2
#define CAN_CONNECT_TOPO comm->topo
#else
#define CAN_CONNECT_ARGS \
  int *ret, struct ncclTopoSystem *topo, struct ncclTopoGraph *, struct ncclPeerInfo *info1, struct ncclPeerInfo *info2
#define CAN_CONNECT_TOPO topo
#endif

// ncclTopoCheckNet names the peers by rank from 2.23, by PCI bus id before.
static ncclResult_t checkNet(struct ncclTopoSystem* system, struct ncclPeerInfo* info1, struct ncclPeerInfo* info2,
                             int* useNet) {
#if AT_LEAST(2, 23)
  return ncclTopoCheckNet(system, info1->rank, info2->rank, useNet);
#else
  return ncclTopoCheckNet(system, info1->busId, info2->busId, useNet);
#endif
}

// transport/p2p.cc, p2pCanConnect, as far as the topology decides: other hosts or containers (checked
// there before 2.24, inside ncclTopoCheckP2p from 2.24), the P2P level, a path through an intermediate
// GPU (refused only with NCCL_P2P_USE_CUDA_MEMCPY), NET being faster. What follows there asks CUDA
// (peer access, legacy IPC); taken as available. The MNNVL check of 2.22/2.23 for GPUs of other hosts
// is left out: the driver's ranks on other nodes share no NVLink fabric with rank 0.
static ncclResult_t p2pCanConnect(CAN_CONNECT_ARGS) {
  struct ncclTopoSystem* system = CAN_CONNECT_TOPO;
  *ret = 0;
#if !AT_LEAST(2, 24)
  if (info1->hostHash != info2->hostHash || info1->shmDev != info2->shmDev) return ncclSuccess;
#endif
  int intermediateRank = -1;
#if AT_LEAST(2, 28)
  NCCLCHECK(ncclTopoCheckP2p(comm, system, info1->rank, info2->rank, ret, NULL, &intermediateRank, NULL));
#elif AT_LEAST(2, 24)
  NCCLCHECK(ncclTopoCheckP2p(comm, system, info1->rank, info2->rank, ret, NULL, &intermediateRank));
#elif AT_LEAST(2, 23)
  NCCLCHECK(ncclTopoCheckP2p(system, info1->rank, info2->rank, ret, NULL, &intermediateRank));
#else
  NCCLCHECK(ncclTopoCheckP2p(system, info1->busId, info2->busId, ret, NULL, &intermediateRank));
#endif
  if (*ret == 0) return ncclSuccess;
  if (intermediateRank != -1) {
    if (envParam("NCCL_P2P_USE_CUDA_MEMCPY", 0)) *ret = 0;
    return ncclSuccess;
  }
  int useNet = 0;
  NCCLCHECK(checkNet(system, info1, info2, &useNet));
  if (useNet) *ret = 0;
  return ncclSuccess;
}

// transport/shm.cc, shmCanConnect: not with NCCL_SHM_DISABLE=1, not where NET is faster, only between
// ranks of one host sharing /dev/shm.
static ncclResult_t shmCanConnect(CAN_CONNECT_ARGS) {
  struct ncclTopoSystem* system = CAN_CONNECT_TOPO;
  *ret = 0;
  if (envParam("NCCL_SHM_DISABLE", 0) == 1) return ncclSuccess;
  int useNet = 0;
  NCCLCHECK(checkNet(system, info1, info2, &useNet));
  if (useNet) return ncclSuccess;
  if (info1->hostHash != info2->hostHash || info1->shmDev != info2->shmDev) return ncclSuccess;
  *ret = 1;
  return ncclSuccess;
}

static struct ncclTransport p2pStandIn = {"P2P", p2pCanConnect};
static struct ncclTransport shmStandIn = {"SHM", shmCanConnect};
static struct ncclTransport noTransport = {"NONE", NULL};

// transport.cc: the table is indexed by TRANSPORT_P2P, TRANSPORT_SHM, TRANSPORT_NET, ...
WEAK struct ncclTransport* ncclTransports[NTRANSPORTS];

__attribute__((constructor)) static void initTransports() {
  for (int t = 0; t < NTRANSPORTS; t++) {
    if (ncclTransports[t] == NULL) ncclTransports[t] = &noTransport;
  }
  ncclTransports[TRANSPORT_P2P] = &p2pStandIn;
  ncclTransports[TRANSPORT_SHM] = &shmStandIn;
}

WEAK ncclNvmlDevicePairInfo ncclNvmlDevicePairs[ncclNvmlMaxDevices][ncclNvmlMaxDevices];

WEAK ncclResult_t ncclNvmlEnsureInitialized() {
  WARN("No NVML in this harness: set NCCL_IGNORE_DISABLED_P2P=2");
  return ncclSystemError;
}

#if !AT_LEAST(2, 26)
WEAK int ncclNetVersion(struct ncclComm*) { return 8; }
#endif

#if __has_include("env.h")
#include "env.h"
WEAK ncclResult_t ncclInitEnv(void) { return ncclSuccess; }
WEAK bool ncclEnvPluginInitialized(void) { return true; }
WEAK const char* ncclEnvPluginGetEnv(const char* name) { return getenv(name); }
#endif

// See the top of this file: a fixed log prefix.
extern "C" long __real_syscall(long number, ...);

extern "C" int __wrap_gethostname(char* name, size_t len) {
  strncpy(name, "nccl", len);
  if (len) name[len - 1] = '\0';
  return 0;
}

extern "C" pid_t __wrap_getpid(void) { return 1000; }

extern "C" long __wrap_syscall(long number, ...) {
  if (number == SYS_gettid) return 1000;
  va_list ap;
  va_start(ap, number);
  long a[6];
  for (int i = 0; i < 6; i++) a[i] = va_arg(ap, long);
  va_end(ap);
  return __real_syscall(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}
