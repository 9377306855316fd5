/* hal's native Vulkan encoder: replays a stream of 64-bit words into one VkCommandBuffer.
 *
 * Python builds the stream (one list of integers per recording) and crosses into C once; every
 * vkCmd* call then costs what the driver charges, not the ~0.7 us a cffi call costs from Python.
 * The few Vulkan structs used are declared here (their layout is fixed by the Vulkan ABI), so no
 * Vulkan headers are needed to build it. The stream format is documented in encoder.py.
 */
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t buffer, offset, range;
} DescriptorBufferInfo;

typedef struct {
    int32_t sType;
    const void *pNext;
    uint64_t dstSet;
    uint32_t dstBinding, dstArrayElement, descriptorCount;
    int32_t descriptorType;
    const void *pImageInfo;
    const DescriptorBufferInfo *pBufferInfo;
    const void *pTexelBufferView;
} WriteDescriptorSet;

typedef struct {
    uint64_t srcOffset, dstOffset, size;
} BufferCopy;

typedef void (*BindPipeline)(void *, int32_t, uint64_t);
typedef void (*PushDescriptorSet)(void *, int32_t, uint64_t, uint32_t, uint32_t, const WriteDescriptorSet *);
typedef void (*BindDescriptorSets)(void *, int32_t, uint64_t, uint32_t, uint32_t, const uint64_t *, uint32_t,
                                   const uint32_t *);
typedef void (*PushConstants)(void *, uint64_t, uint32_t, uint32_t, uint32_t, const void *);
typedef void (*Dispatch)(void *, uint32_t, uint32_t, uint32_t);
typedef void (*FillBuffer)(void *, uint64_t, uint64_t, uint64_t, uint32_t);
typedef void (*UpdateBuffer)(void *, uint64_t, uint64_t, uint64_t, const void *);
typedef void (*CopyBuffer)(void *, uint64_t, uint64_t, uint32_t, const BufferCopy *);
typedef void (*PipelineBarrier)(void *, uint32_t, uint32_t, uint32_t, uint32_t, const void *, uint32_t, const void *,
                                uint32_t, const void *);

/* Opcodes and the words that follow each (encoder.py writes them). */
enum {
    OP_BIND_PIPELINE = 1,   /* pipeline */
    OP_PUSH_DESCRIPTORS = 2, /* layout, count, then count x (buffer, offset, range) */
    OP_BIND_SET = 3,        /* layout, descriptor set */
    OP_PUSH_CONSTANTS = 4,  /* layout, n, then n 32-bit constants (one per word) */
    OP_DISPATCH = 5,        /* x, y, z */
    OP_FILL = 6,            /* buffer, offset, size, 32-bit pattern */
    OP_UPDATE = 7,          /* buffer, offset, size, address of the data */
    OP_COPY = 8,            /* source, target, source offset, target offset, size */
    OP_BARRIER = 9,         /* (none) */
};

/* The function table, in this order (encoder.py: NATIVE_FUNCTIONS). */
enum { F_BIND, F_PUSH_SET, F_BIND_SETS, F_PUSH_CONSTANTS, F_DISPATCH, F_FILL, F_UPDATE, F_COPY, F_BARRIER, F_COUNT };

#define BIND_POINT_COMPUTE 1
#define STAGE_COMPUTE 0x20
#define DESCRIPTOR_STORAGE_BUFFER 7
#define STRUCTURE_WRITE_DESCRIPTOR_SET 35
#define MAX_BINDINGS 64
#define MAX_CONSTANTS 256 /* 1 KiB, beyond any maxPushConstantsSize seen */

/* Returns 0, or the word index of the first malformed instruction plus one (nothing after it is recorded). */
int64_t hal_vk_encode(void *cb, const uint64_t *s, uint64_t n, const uint64_t *fns, const void *barrier,
                      uint32_t stages) {
    DescriptorBufferInfo infos[MAX_BINDINGS];
    uint32_t constants[MAX_CONSTANTS];
    WriteDescriptorSet write = {STRUCTURE_WRITE_DESCRIPTOR_SET, NULL, 0, 0, 0, 0, DESCRIPTOR_STORAGE_BUFFER,
                                NULL, infos, NULL};
    uint64_t i = 0;
    while (i < n) {
        uint64_t at = i, op = s[i++];
        switch (op) {
        case OP_BIND_PIPELINE:
            if (i + 1 > n) return (int64_t)at + 1;
            ((BindPipeline)fns[F_BIND])(cb, BIND_POINT_COMPUTE, s[i]);
            i += 1;
            break;
        case OP_PUSH_DESCRIPTORS: {
            if (i + 2 > n) return (int64_t)at + 1;
            uint64_t layout = s[i], count = s[i + 1];
            if (count > MAX_BINDINGS || i + 2 + 3 * count > n) return (int64_t)at + 1;
            for (uint64_t k = 0; k < count; k++) {
                infos[k].buffer = s[i + 2 + 3 * k];
                infos[k].offset = s[i + 3 + 3 * k];
                infos[k].range = s[i + 4 + 3 * k];
            }
            write.descriptorCount = (uint32_t)count;
            ((PushDescriptorSet)fns[F_PUSH_SET])(cb, BIND_POINT_COMPUTE, layout, 0, 1, &write);
            i += 2 + 3 * count;
            break;
        }
        case OP_BIND_SET:
            if (i + 2 > n) return (int64_t)at + 1;
            ((BindDescriptorSets)fns[F_BIND_SETS])(cb, BIND_POINT_COMPUTE, s[i], 0, 1, &s[i + 1], 0, NULL);
            i += 2;
            break;
        case OP_PUSH_CONSTANTS: {
            if (i + 2 > n) return (int64_t)at + 1;
            uint64_t count = s[i + 1];
            if (count > MAX_CONSTANTS || i + 2 + count > n) return (int64_t)at + 1;
            for (uint64_t k = 0; k < count; k++) constants[k] = (uint32_t)s[i + 2 + k];
            ((PushConstants)fns[F_PUSH_CONSTANTS])(cb, s[i], STAGE_COMPUTE, 0, (uint32_t)(4 * count), constants);
            i += 2 + count;
            break;
        }
        case OP_DISPATCH:
            if (i + 3 > n) return (int64_t)at + 1;
            ((Dispatch)fns[F_DISPATCH])(cb, (uint32_t)s[i], (uint32_t)s[i + 1], (uint32_t)s[i + 2]);
            i += 3;
            break;
        case OP_FILL:
            if (i + 4 > n) return (int64_t)at + 1;
            ((FillBuffer)fns[F_FILL])(cb, s[i], s[i + 1], s[i + 2], (uint32_t)s[i + 3]);
            i += 4;
            break;
        case OP_UPDATE:
            if (i + 4 > n) return (int64_t)at + 1;
            ((UpdateBuffer)fns[F_UPDATE])(cb, s[i], s[i + 1], s[i + 2], (const void *)(uintptr_t)s[i + 3]);
            i += 4;
            break;
        case OP_COPY: {
            if (i + 5 > n) return (int64_t)at + 1;
            BufferCopy region = {s[i + 2], s[i + 3], s[i + 4]};
            ((CopyBuffer)fns[F_COPY])(cb, s[i], s[i + 1], 1, &region);
            i += 5;
            break;
        }
        case OP_BARRIER:
            ((PipelineBarrier)fns[F_BARRIER])(cb, stages, stages, 0, 1, barrier, 0, NULL, 0, NULL);
            break;
        default:
            return (int64_t)at + 1;
        }
    }
    return 0;
}
