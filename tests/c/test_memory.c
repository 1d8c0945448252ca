/* Memory accounting and device memory: counts and bytes against the sizes
 * of the tensors made (4 bytes per float), struct_size handling, total and
 * free against /proc/meminfo read here. */
#include <stddef.h>

#include "check.h"

/* /proc/meminfo's MemTotal in bytes, or -1. */
static int64_t mem_total(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (f == NULL) return -1;
    char line[256];
    long long kb = -1;
    while (fgets(line, sizeof line, f) != NULL) {
        if (sscanf(line, "MemTotal: %lld kB", &kb) == 1) break;
    }
    fclose(f);
    return kb < 0 ? -1 : (int64_t)kb * 1024;
}

static ttpu_tensor_t *upload(const ttpu_runtime_t *rt, int64_t n, int64_t device) {
    float *data = calloc((size_t)n, sizeof(float));
    CHECK(data != NULL);
    ttpu_tensor_t *t = NULL;
    CHECK_OK(ttpu_tensor_from_host(rt, data, (size_t)n * sizeof(float), TTPU_DTYPE_FLOAT32, &n, 1, device, &t));
    free(data);
    return t;
}

int main(void) {
    ttpu_runtime_options_t opts;
    memset(&opts, 0, sizeof opts);
    opts.struct_size = sizeof opts;
    opts.cpu_device_count = 2;
    ttpu_runtime_t *rt = NULL;
    CHECK_OK(ttpu_runtime_create(&opts, &rt));

    /* Counts on device 1, where nothing else of this runtime allocates. */
    CHECK_OK(ttpu_runtime_reset_accumulated_memory(rt, 1));
    CHECK_OK(ttpu_runtime_reset_peak_memory(rt, 1));
    ttpu_memory_stats_t s0;
    memset(&s0, 0, sizeof s0);
    s0.struct_size = sizeof s0;
    CHECK_OK(ttpu_runtime_memory_stats(rt, 1, &s0));
    CHECK(s0.struct_size == sizeof s0);
    CHECK(s0.allocated_bytes == 0 && s0.freed_bytes == 0 && s0.allocated_buffers == 0 && s0.freed_buffers == 0);
    CHECK(s0.num_ooms == 0 && s0.peak_bytes == s0.live_bytes && s0.peak_buffers == s0.live_buffers);

    ttpu_tensor_t *a = upload(rt, 1000, 1);
    ttpu_tensor_t *b = upload(rt, 24, 1);
    ttpu_tensor_destroy(a);
    ttpu_memory_stats_t s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    CHECK_OK(ttpu_runtime_memory_stats(rt, 1, &s));
    CHECK(s.live_bytes == s0.live_bytes + 96);
    CHECK(s.peak_bytes == s0.live_bytes + 4096);
    CHECK(s.allocated_bytes == 4096 && s.freed_bytes == 4000);
    CHECK(s.live_buffers == s0.live_buffers + 1 && s.peak_buffers == s0.live_buffers + 2);
    CHECK(s.allocated_buffers == 2 && s.freed_buffers == 1);
    /* The older call agrees. */
    int64_t live = -1, peak = -1;
    CHECK_OK(ttpu_runtime_memory(rt, 1, &live, &peak));
    CHECK(live == s.live_bytes && peak == s.peak_bytes);

    /* Resetting the totals keeps what is live and the peaks. */
    CHECK_OK(ttpu_runtime_reset_accumulated_memory(rt, 1));
    ttpu_tensor_destroy(b);
    CHECK_OK(ttpu_runtime_memory_stats(rt, 1, &s));
    CHECK(s.live_bytes == s0.live_bytes && s.peak_bytes == s0.live_bytes + 4096);
    CHECK(s.allocated_bytes == 0 && s.freed_bytes == 96 && s.allocated_buffers == 0 && s.freed_buffers == 1);

    /* struct_size: too small is rejected and nothing is written; a newer
     * caller's larger struct is accepted and its extra field untouched. */
    s.struct_size = sizeof s - 8;
    s.live_bytes = -7;
    CHECK_CODE_MSG(ttpu_runtime_memory_stats(rt, 1, &s), TTPU_CODE_INVALID_ARGUMENT, "struct_size");
    CHECK(s.live_bytes == -7);
    struct { ttpu_memory_stats_t v1; int64_t future; } bigger;
    memset(&bigger, 0, sizeof bigger);
    bigger.v1.struct_size = sizeof bigger;
    bigger.future = 42;
    CHECK_OK(ttpu_runtime_memory_stats(rt, 1, &bigger.v1));
    CHECK(bigger.v1.live_bytes == s0.live_bytes && bigger.future == 42);
    CHECK_CODE(ttpu_runtime_memory_stats(rt, 1, NULL), TTPU_CODE_INVALID_ARGUMENT);
    s.struct_size = sizeof s;
    CHECK_CODE(ttpu_runtime_memory_stats(rt, 2, &s), TTPU_CODE_OUT_OF_RANGE);
    CHECK_CODE(ttpu_runtime_memory_stats(NULL, 0, &s), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_runtime_reset_accumulated_memory(rt, -1), TTPU_CODE_OUT_OF_RANGE);

    /* Device memory: the CPU plugin reports no limit, so the host's memory
     * (at most MemTotal, less under a cgroup limit) stands in, shared by
     * every CPU device. */
    ttpu_memory_info_t info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    CHECK_OK(ttpu_runtime_memory_info(rt, 0, &info));
    CHECK(info.source == TTPU_MEMORY_SOURCE_HOST);
    int64_t host = mem_total();
    CHECK(host > 0);
    CHECK(info.total_bytes > 0 && info.total_bytes <= host);
    CHECK(info.free_bytes >= 0 && info.free_bytes <= info.total_bytes);
    ttpu_memory_info_t info1;
    memset(&info1, 0, sizeof info1);
    info1.struct_size = sizeof info1;
    CHECK_OK(ttpu_runtime_memory_info(rt, 1, &info1));
    CHECK(info1.total_bytes == info.total_bytes);
    info1.struct_size = offsetof(ttpu_memory_info_t, source);
    CHECK_CODE(ttpu_runtime_memory_info(rt, 0, &info1), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_runtime_memory_info(rt, 0, NULL), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_runtime_memory_info(rt, 5, &info), TTPU_CODE_OUT_OF_RANGE);

    ttpu_runtime_destroy(rt);
    printf("test_memory: ok\n");
    return 0;
}
