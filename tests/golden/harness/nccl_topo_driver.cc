/*
 * Drives NCCL's own host-side topology code (src/graph/{topo,paths,search,xml}.cc of the checkout the
 * harness was built from) the way init.cc's initTransportsRank does for rank 0 of a communicator,
 * without a GPU, and lets NCCL print what it prints with NCCL_DEBUG_SUBSYS=GRAPH.
 *
 *   nccl_topo_driver [--nodes N] [--system] [--search] TOPOLOGY.xml
 *
 *   --nodes N   rank 0 of a communicator of N identical nodes (default 1): every GPU of the file on
 *               the first node, the same number of ranks on each other node
 *   --system    print the system and its paths as init.cc does after ncclTopoSearchInit (ncclTopoPrint)
 *   --search    search and print the graphs in init.cc's order (ncclTopoCompute + ncclTopoPrintGraph)
 *
 * Environment read here (NCCL reads the rest itself, e.g. NCCL_CROSS_NIC or NCCL_GRAPH_DUMP_FILE):
 *   NCCL_COLLNET_ENABLE=1  a CollNet plugin is emulated: the CollNet graphs are searched
 *   NCCL_NVLS_ENABLE       0 (no NVLS graph), 1 (forced), 2 (default: multicast where NCCL would find it)
 *
 * Everything printed on stdout comes from NCCL's debug.cc ("nccl:1000:1000 [0] NCCL INFO ...", the
 * prefix fixed by nccl_stubs.cc); messages of this driver go to stderr.
 */
#include "comm.h"
#include "graph.h"
#include "topo.h"
#include "transport.h"
#include "xml.h"

#include <algorithm>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AT_LEAST(major, minor) (NCCL_VERSION_CODE >= NCCL_VERSION(major, minor, 0))

#define CHECK(call)                                                                      \
  do {                                                                                   \
    ncclResult_t res_ = (call);                                                          \
    if (res_ != ncclSuccess) {                                                           \
      fprintf(stderr, "nccl_topo_driver: %s failed (%d) at line %d\n", #call, (int)res_, \
              __LINE__);                                                                 \
      exit(2);                                                                           \
    }                                                                                    \
  } while (0)

// Size of the XML tree read from the file. ncclTopoGetSystem reads NCCL_TOPO_FILE into
// NCCL_TOPO_XML_MAX_NODES (256) nodes since 2.22; a 72-GPU MNNVL domain in one file needs more,
// which NCCL itself only ever builds in memory (topology fusion). Releases before 2.22 have a
// fixed-size struct ncclXml (MAX_NODES).
#define DRIVER_XML_MAX_NODES 4096

static void usage() {
  fprintf(stderr, "usage: nccl_topo_driver [--nodes N] [--system] [--search] TOPOLOGY.xml\n");
  exit(1);
}

static int envInt(const char* name, int dflt) {
  const char* s = getenv(name);
  return (s && *s) ? atoi(s) : dflt;
}

static struct ncclXml* readXml(const char* path) {
  struct ncclXml* xml;
#if AT_LEAST(2, 22)
  CHECK(xmlAlloc(&xml, DRIVER_XML_MAX_NODES));
#else
  xml = (struct ncclXml*)calloc(1, sizeof(struct ncclXml));
  if (xml == NULL) {
    fprintf(stderr, "nccl_topo_driver: out of memory\n");
    exit(2);
  }
#endif
  CHECK(ncclTopoGetXmlFromFile(path, xml, 1));
  if (xml->maxIndex == 0) {
    fprintf(stderr, "nccl_topo_driver: nothing read from %s\n", path);
    exit(2);
  }
  return xml;
}

// The host_hash attribute of the <cpu> element above a node (0 when absent: the file then describes
// one host, which is the host of rank 0).
static uint64_t hostHashOf(struct ncclXmlNode* node) {
  for (; node; node = node->parent) {
    if (strcmp(node->name, "cpu") == 0) {
      const char* str;
      CHECK(xmlGetAttr(node, "host_hash", &str));
      return str ? strtoull(str, NULL, 16) : 0;
    }
  }
  return 0;
}

struct XmlGpu {
  int rank;
  int sm;
  int64_t busId;
  uint64_t hostHash;
};

// Every <gpu> of the file with its rank (the rank attribute NCCL writes), compute capability, PCI
// bus id and host.
static int listGpus(struct ncclXml* xml, struct XmlGpu* gpus, int max) {
  int n = 0;
  for (int i = 0; i < xml->maxIndex; i++) {
    struct ncclXmlNode* node = xml->nodes + i;
    if (strcmp(node->name, "gpu") != 0) continue;
    if (n == max) {
      fprintf(stderr, "nccl_topo_driver: more than %d GPUs\n", max);
      exit(2);
    }
    struct XmlGpu* g = gpus + n++;
    CHECK(xmlGetAttrInt(node, "rank", &g->rank));
    CHECK(xmlGetAttrInt(node, "sm", &g->sm));
    const char* busId = NULL;
    if (node->parent) CHECK(xmlGetAttr(node->parent, "busid", &busId));
    g->busId = 0;
    if (busId) CHECK(busIdToInt64(busId, &g->busId));
    g->hostHash = hostHashOf(node);
  }
  return n;
}

// A communicator as far as the graph code reads it before the searches: rank, size and the peer
// information NCCL gathers in its first AllGather (init.cc: fillInfo). Ranks of the file sit on
// rank 0's node; every other node holds as many ranks, on another host. The file's GPUs all count as
// one node even where its <cpu> elements carry several host hashes (a multi-node NVLink domain):
// the P2P checks then see them as NCCL's MNNVL checks would, through one NVLink fabric.
static struct ncclComm* makeComm(struct XmlGpu* gpus, int nGpus, int nNodes) {
  struct ncclComm* comm = (struct ncclComm*)calloc(1, sizeof(struct ncclComm));
  int nRanks = nGpus * nNodes;
  // init.cc allocates nRanks+1 entries (the last one for CollNet).
  struct ncclPeerInfo* info = (struct ncclPeerInfo*)calloc(nRanks + 1, sizeof(struct ncclPeerInfo));
  if (comm == NULL || info == NULL) {
    fprintf(stderr, "nccl_topo_driver: out of memory\n");
    exit(2);
  }
  const uint64_t hostHashBase = 0x6e636e6f64650000ULL;  // any value: only equality between ranks matters
  for (int g = 0; g < nGpus; g++) {
    int r = gpus[g].rank;
    if (r < 0 || r >= nGpus) {
      fprintf(stderr, "nccl_topo_driver: GPU rank %d outside 0..%d\n", r, nGpus - 1);
      exit(2);
    }
    for (int node = 0; node < nNodes; node++) {
      struct ncclPeerInfo* p = info + node * nGpus + r;
      p->rank = node * nGpus + r;
      p->cudaDev = r;
      p->nvmlDev = r;
      p->hostHash = hostHashBase + node;
      p->pidHash = hostHashBase + node;
      p->busId = gpus[g].busId;
      p->cudaCompCap = gpus[g].sm;
      p->comm = node == 0 ? comm : NULL;
    }
  }
  comm->rank = 0;
  comm->nRanks = nRanks;
  comm->peerInfo = info;
  return comm;
}

// ncclNvlsInit (src/transport/nvls.cc): NVLS needs NCCL_NVLS_ENABLE != 0 and more than two GPUs
// (at least two from 2.28); with NCCL_NVLS_ENABLE=2 (the default) it asks the CUDA driver whether
// the device supports multicast, which it does for SM90 and newer GPUs attached to NVSwitches.
static int nvlsSupport(struct ncclTopoSystem* system) {
  int enable = envInt("NCCL_NVLS_ENABLE", 2);
  int gpuCount = system->nodes[GPU].count;
#if AT_LEAST(2, 28)
  if (!enable || gpuCount < 2) return 0;
#else
  if (!enable || gpuCount <= 2) return 0;
#endif
  if (enable != 2) return 1;
  int ccMin = 1 << 30;
  for (int g = 0; g < gpuCount; g++) ccMin = std::min(ccMin, system->nodes[GPU].nodes[g].gpu.cudaCompCap);
  return ccMin >= 90 && system->nodes[NVS].count > 0;
}

static struct ncclTopoGraph* newGraph(int id, int pattern, int collNet, int minChannels, int maxChannels) {
  struct ncclTopoGraph* graph = (struct ncclTopoGraph*)calloc(1, sizeof(struct ncclTopoGraph));
  if (graph == NULL) {
    fprintf(stderr, "nccl_topo_driver: out of memory\n");
    exit(2);
  }
  graph->id = id;
  graph->pattern = pattern;
  graph->collNet = collNet;
  graph->minChannels = minChannels;
  graph->maxChannels = maxChannels;
  return graph;
}

static void computeAndPrint(struct ncclTopoSystem* system, struct ncclTopoGraph* graph) {
  CHECK(ncclTopoCompute(system, graph));
  CHECK(ncclTopoPrintGraph(system, graph));
}

// init.cc (initTransportsRank, "Get rings and trees"): ring, tree, the CollNet graphs when CollNet is
// enabled, NVLS when supported; then ncclTopoDumpGraphs (NCCL_GRAPH_DUMP_FILE) on rank 0.
static void searchGraphs(struct ncclTopoSystem* system, int collNet, int nvls) {
  struct ncclTopoGraph* ring = newGraph(0, NCCL_TOPO_PATTERN_RING, 0, 1, MAXCHANNELS / 2);
  computeAndPrint(system, ring);

  struct ncclTopoGraph* tree =
      newGraph(1, NCCL_TOPO_PATTERN_BALANCED_TREE, 0, ring->nChannels, ring->nChannels);
  computeAndPrint(system, tree);

  // CollNet chain: id 2, pattern TREE over the CollNet NICs, the ring's channel count.
  struct ncclTopoGraph* collNetChain = newGraph(2, NCCL_TOPO_PATTERN_TREE, 1, ring->nChannels, ring->nChannels);
#ifdef NCCL_TOPO_PATTERN_COLLNET_DIRECT
  // CollNet direct (2.22 and later): id 2 in 2.22, 4 from 2.23; 1 to MAXCHANNELS channels.
  struct ncclTopoGraph* collNetDirect =
      newGraph(AT_LEAST(2, 23) ? 4 : 2, NCCL_TOPO_PATTERN_COLLNET_DIRECT, 1, 1, MAXCHANNELS);
#endif
  if (collNet) {
    computeAndPrint(system, collNetChain);
#ifdef NCCL_TOPO_PATTERN_COLLNET_DIRECT
    computeAndPrint(system, collNetDirect);
#endif
  }

  struct ncclTopoGraph* nvlsGraph = newGraph(3, NCCL_TOPO_PATTERN_NVLS, 0, 1, MAXCHANNELS);
  if (nvls) computeAndPrint(system, nvlsGraph);

  if (getenv("NCCL_GRAPH_DUMP_FILE")) {
#ifdef NCCL_TOPO_PATTERN_COLLNET_DIRECT
    struct ncclTopoGraph* dump[] = {ring, tree, collNetDirect, collNetChain, nvlsGraph};
#else
    struct ncclTopoGraph* dump[] = {ring, tree, collNetChain, nvlsGraph};
#endif
    CHECK(ncclTopoDumpGraphs(system, sizeof(dump) / sizeof(dump[0]), dump));
  }
}

int main(int argc, char** argv) {
  int nNodes = 1, printSystem = 0, search = 0;
  const char* xmlPath = NULL;
  for (int a = 1; a < argc; a++) {
    if (strcmp(argv[a], "--nodes") == 0 && a + 1 < argc) {
      nNodes = atoi(argv[++a]);
    } else if (strcmp(argv[a], "--system") == 0) {
      printSystem = 1;
    } else if (strcmp(argv[a], "--search") == 0) {
      search = 1;
    } else if (argv[a][0] == '-' || xmlPath) {
      usage();
    } else {
      xmlPath = argv[a];
    }
  }
  if (xmlPath == NULL || nNodes < 1) usage();

  // NCCL prints the system and the graphs at INFO level, subsystem GRAPH.
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "GRAPH", 1);
  // No NVML here: take CUDA P2P as available between the GPUs of a node instead of reading NVML's
  // P2P status (paths.cc, ncclTopoCheckP2p).
  setenv("NCCL_IGNORE_DISABLED_P2P", "2", 0);

  struct ncclXml* xml = readXml(xmlPath);
  static struct XmlGpu gpus[NCCL_TOPO_MAX_NODES];
  int nGpus = listGpus(xml, gpus, NCCL_TOPO_MAX_NODES);
  uint64_t localHostHash = 0;
  int found = 0;
  for (int g = 0; g < nGpus; g++) {
    if (gpus[g].rank == 0) {
      localHostHash = gpus[g].hostHash;
      found = 1;
    }
  }
  if (!found) {
    fprintf(stderr, "nccl_topo_driver: no GPU with rank 0 in %s\n", xmlPath);
    return 2;
  }

  // init.cc: ncclTopoGetSystem, ncclTopoComputePaths, ncclTopoTrimSystem, ncclTopoComputePaths,
  // ncclTopoSearchInit, ncclTopoPrint. ncclTopoGetSystem reads NCCL_TOPO_FILE, adds what it detects
  // (the local GPU through NVML/sysfs, the NICs the net plugins report), fuses the XML of the node's
  // ranks and drops the elements nobody keeps before ncclTopoGetSystemFromXml; the file here already
  // is what rank 0 ends up with, so it goes to ncclTopoGetSystemFromXml directly.
  struct ncclTopoSystem* system;
#if AT_LEAST(2, 22)
  CHECK(ncclTopoGetSystemFromXml(xml, &system, localHostHash));
#else
  (void)localHostHash;
  CHECK(ncclTopoGetSystemFromXml(xml, &system));
#endif
  struct ncclComm* comm = makeComm(gpus, nGpus, nNodes);
  comm->topo = system;
  CHECK(ncclTopoComputePaths(system, comm));
  CHECK(ncclTopoTrimSystem(system, comm));
  CHECK(ncclTopoComputePaths(system, comm));
  CHECK(ncclTopoSearchInit(system));
  if (printSystem) CHECK(ncclTopoPrint(system));

  if (search) {
    // init.cc: CollNet needs a CollNet plugin and NCCL_COLLNET_ENABLE=1 (comm->collNetSupport up to 2.26,
    // comm->config.collnetEnable from 2.27).
    int collNet = envInt("NCCL_COLLNET_ENABLE", 0) == 1;
    searchGraphs(system, collNet, nvlsSupport(system));
  }
  fflush(stdout);
  return 0;
}
