/* hal's native CUDA graph helper: one stream of 64-bit words, three uses.
 *
 *   hal_cu_build:  add the nodes to a CUgraph (kernel, memset, memcpy, empty), with their dependencies
 *   hal_cu_patch:  set new parameters on the nodes of an instantiated CUgraphExec (rebinding)
 *   hal_cu_launch: launch the same commands on a stream, in order (one-shot command buffers)
 *
 * Python builds the stream and crosses into C once; every driver call then costs what the driver
 * charges, not the microseconds a Python wrapper adds. The driver structs are declared here with
 * their cuda.h layout (no CUDA headers needed to build); the entry points come from cuGetProcAddress.
 * The stream format is documented in stream.py.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

typedef int CUresult;

typedef struct {
    uint64_t func;
    uint32_t gridDimX, gridDimY, gridDimZ;
    uint32_t blockDimX, blockDimY, blockDimZ;
    uint32_t sharedMemBytes;
    void **kernelParams;
    void **extra;
    uint64_t kern; /* CUDA_KERNEL_NODE_PARAMS_v2 */
    uint64_t ctx;
} KernelNodeParams;

typedef struct {
    uint64_t dst;
    size_t pitch;
    uint32_t value;
    uint32_t elementSize;
    size_t width;
    size_t height;
} MemsetNodeParams;

typedef struct {
    size_t srcXInBytes, srcY, srcZ, srcLOD;
    int32_t srcMemoryType;
    const void *srcHost;
    uint64_t srcDevice;
    void *srcArray;
    void *reserved0;
    size_t srcPitch, srcHeight;
    size_t dstXInBytes, dstY, dstZ, dstLOD;
    int32_t dstMemoryType;
    void *dstHost;
    uint64_t dstDevice;
    void *dstArray;
    void *reserved1;
    size_t dstPitch, dstHeight;
    size_t WidthInBytes, Height, Depth;
} Memcpy3D;

typedef CUresult (*AddKernelNode)(uint64_t *, uint64_t, const uint64_t *, size_t, const KernelNodeParams *);
typedef CUresult (*AddMemsetNode)(uint64_t *, uint64_t, const uint64_t *, size_t, const MemsetNodeParams *, uint64_t);
typedef CUresult (*AddMemcpyNode)(uint64_t *, uint64_t, const uint64_t *, size_t, const Memcpy3D *, uint64_t);
typedef CUresult (*AddEmptyNode)(uint64_t *, uint64_t, const uint64_t *, size_t);
typedef CUresult (*SetKernelParams)(uint64_t, uint64_t, const KernelNodeParams *);
typedef CUresult (*SetMemsetParams)(uint64_t, uint64_t, const MemsetNodeParams *, uint64_t);
typedef CUresult (*SetMemcpyParams)(uint64_t, uint64_t, const Memcpy3D *, uint64_t);
typedef CUresult (*LaunchKernel)(uint64_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t,
                                 uint64_t, void **, void **);
typedef CUresult (*MemsetD8)(uint64_t, uint8_t, size_t, uint64_t);
typedef CUresult (*MemsetD16)(uint64_t, uint16_t, size_t, uint64_t);
typedef CUresult (*MemsetD32)(uint64_t, uint32_t, size_t, uint64_t);
typedef CUresult (*MemcpyAsync)(uint64_t, uint64_t, size_t, uint64_t);

/* The entry points, in this order (stream.py: FUNCTIONS). */
enum {
    F_ADD_KERNEL, F_ADD_MEMSET, F_ADD_MEMCPY, F_ADD_EMPTY, F_SET_KERNEL, F_SET_MEMSET, F_SET_MEMCPY, F_LAUNCH,
    F_MEMSET8, F_MEMSET16, F_MEMSET32, F_MEMCPY, F_COUNT
};

/* Opcodes. Every command is: opcode, node slot, its operands, then its dependencies (n, then n node
 * slots; only building reads them):
 *   KERNEL: func, grid x y z, block x y z, n params, params (one word each)
 *   MEMSET: target, value, element size, elements
 *   MEMCPY: target, source, bytes
 *   EMPTY:  (none)
 */
enum { OP_KERNEL = 1, OP_MEMSET = 2, OP_MEMCPY = 3, OP_EMPTY = 4 };

#define MAX_PARAMS 1024 /* 4 KiB of 32-bit parameters: the classic kernel parameter limit */
#define MEMORY_DEVICE 2

static int64_t fail(uint64_t at, CUresult r) { return ((int64_t)(at + 1) << 32) | (uint32_t)r; }

static void memcpy_params(Memcpy3D *p, uint64_t dst, uint64_t src, uint64_t bytes) {
    Memcpy3D zero = {0};
    *p = zero;
    p->srcMemoryType = MEMORY_DEVICE; /* unified addressing: pinned host staging has a device address */
    p->srcDevice = src;
    p->dstMemoryType = MEMORY_DEVICE;
    p->dstDevice = dst;
    p->WidthInBytes = bytes;
    p->Height = 1;
    p->Depth = 1;
}

/* mode: 0 build (graph), 1 patch (exec), 2 launch (stream). Returns 0, or ((word index + 1) << 32) | CUresult
 * of the first failing call (nothing after it is done), or ((index + 1) << 32) | 0xFFFFFFFF for a malformed
 * stream. */
static int64_t run(int mode, uint64_t target, const uint64_t *s, uint64_t n, const uint64_t *fns, uint64_t *nodes,
                   uint64_t ctx) {
    static __thread uint64_t *deps = NULL;
    static __thread uint64_t deps_capacity = 0;
    uint64_t values[MAX_PARAMS];
    void *pointers[MAX_PARAMS];
    uint64_t i = 0;
    while (i < n) {
        uint64_t at = i;
        if (i + 2 > n) return fail(at, -1);
        uint64_t op = s[i], slot = s[i + 1];
        i += 2;
        KernelNodeParams kp;
        MemsetNodeParams mp;
        Memcpy3D cp;
        switch (op) {
        case OP_KERNEL: {
            if (i + 8 > n) return fail(at, -1);
            uint64_t count = s[i + 7];
            if (count > MAX_PARAMS || i + 8 + count > n) return fail(at, -1);
            for (uint64_t k = 0; k < count; k++) {
                values[k] = s[i + 8 + k];
                pointers[k] = &values[k]; /* a 32-bit parameter reads the low half: little-endian */
            }
            KernelNodeParams p = {s[i], (uint32_t)s[i + 1], (uint32_t)s[i + 2], (uint32_t)s[i + 3],
                                  (uint32_t)s[i + 4], (uint32_t)s[i + 5], (uint32_t)s[i + 6], 0, pointers, NULL, 0, 0};
            kp = p;
            i += 8 + count;
            break;
        }
        case OP_MEMSET: {
            if (i + 4 > n) return fail(at, -1);
            MemsetNodeParams p = {s[i], 0, (uint32_t)s[i + 1], (uint32_t)s[i + 2], s[i + 3], 1};
            mp = p;
            i += 4;
            break;
        }
        case OP_MEMCPY:
            if (i + 3 > n) return fail(at, -1);
            memcpy_params(&cp, s[i], s[i + 1], s[i + 2]);
            i += 3;
            break;
        case OP_EMPTY:
            break;
        default:
            return fail(at, -1);
        }
        if (i + 1 > n) return fail(at, -1);
        uint64_t ndeps = s[i], first_dep = i + 1;
        if (i + 1 + ndeps > n) return fail(at, -1);
        i += 1 + ndeps;
        CUresult r = 0;
        if (mode == 0) {
            if (ndeps > deps_capacity) {
                uint64_t *grown = realloc(deps, ndeps * sizeof *deps);
                if (!grown) return fail(at, 2); /* CUDA_ERROR_OUT_OF_MEMORY */
                deps = grown;
                deps_capacity = ndeps;
            }
            for (uint64_t k = 0; k < ndeps; k++) deps[k] = nodes[s[first_dep + k]];
            uint64_t *node = &nodes[slot];
            if (op == OP_KERNEL) r = ((AddKernelNode)fns[F_ADD_KERNEL])(node, target, deps, ndeps, &kp);
            else if (op == OP_MEMSET) r = ((AddMemsetNode)fns[F_ADD_MEMSET])(node, target, deps, ndeps, &mp, ctx);
            else if (op == OP_MEMCPY) r = ((AddMemcpyNode)fns[F_ADD_MEMCPY])(node, target, deps, ndeps, &cp, ctx);
            else r = ((AddEmptyNode)fns[F_ADD_EMPTY])(node, target, deps, ndeps);
        } else if (mode == 1) {
            if (op == OP_KERNEL) r = ((SetKernelParams)fns[F_SET_KERNEL])(target, nodes[slot], &kp);
            else if (op == OP_MEMSET) r = ((SetMemsetParams)fns[F_SET_MEMSET])(target, nodes[slot], &mp, ctx);
            else if (op == OP_MEMCPY) r = ((SetMemcpyParams)fns[F_SET_MEMCPY])(target, nodes[slot], &cp, ctx);
        } else {
            if (op == OP_KERNEL) {
                r = ((LaunchKernel)fns[F_LAUNCH])(kp.func, kp.gridDimX, kp.gridDimY, kp.gridDimZ, kp.blockDimX,
                                                  kp.blockDimY, kp.blockDimZ, 0, target, pointers, NULL);
            } else if (op == OP_MEMSET) {
                if (mp.elementSize == 1) r = ((MemsetD8)fns[F_MEMSET8])(mp.dst, (uint8_t)mp.value, mp.width, target);
                else if (mp.elementSize == 2)
                    r = ((MemsetD16)fns[F_MEMSET16])(mp.dst, (uint16_t)mp.value, mp.width, target);
                else r = ((MemsetD32)fns[F_MEMSET32])(mp.dst, mp.value, mp.width, target);
            } else if (op == OP_MEMCPY) {
                r = ((MemcpyAsync)fns[F_MEMCPY])(cp.dstDevice, cp.srcDevice, cp.WidthInBytes, target);
            }
        }
        if (r) return fail(at, r);
    }
    return 0;
}

/* ctx: the context memset and memcpy nodes run in. */
int64_t hal_cu_build(uint64_t graph, const uint64_t *s, uint64_t n, const uint64_t *fns, uint64_t *nodes,
                     uint64_t ctx) {
    return run(0, graph, s, n, fns, nodes, ctx);
}

int64_t hal_cu_patch(uint64_t exec, const uint64_t *s, uint64_t n, const uint64_t *fns, uint64_t *nodes,
                     uint64_t ctx) {
    return run(1, exec, s, n, fns, nodes, ctx);
}

int64_t hal_cu_launch(uint64_t stream, const uint64_t *s, uint64_t n, const uint64_t *fns) {
    return run(2, stream, s, n, fns, NULL, 0);
}
