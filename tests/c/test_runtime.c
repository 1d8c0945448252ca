/* The runtime area: create (options, struct_size), devices, modes, stats,
 * versions, NULL and destroyed runtimes. */
/* setenv and unsetenv (POSIX), for the plugin search order. */
#define _POSIX_C_SOURCE 200112L
#include <stddef.h>
#include <stdint.h>

#include "check.h"

int main(void) {
    /* Version macros agree with the library. */
    CHECK(ttpu_api_version() == TTPU_API_MAJOR * 1000u + TTPU_API_MINOR);
    const char *v = ttpu_version();
    CHECK(v != NULL && strlen(v) >= 5 && strchr(v, '.') != NULL);

    /* Options: wrong struct_size, negative device count, NULL out. */
    ttpu_runtime_options_t opts;
    memset(&opts, 0, sizeof opts);
    ttpu_runtime_t *rt = NULL;
    /* Shorter than version 1 (which ends with cpu_device_count). */
    opts.struct_size = offsetof(ttpu_runtime_options_t, cpu_device_count);
    CHECK_CODE_MSG(ttpu_runtime_create(&opts, &rt), TTPU_CODE_INVALID_ARGUMENT, "struct_size");
    CHECK(rt == NULL);
    opts.struct_size = 0;
    CHECK_CODE(ttpu_runtime_create(&opts, &rt), TTPU_CODE_INVALID_ARGUMENT);
    opts.struct_size = sizeof opts;
    opts.cpu_device_count = -1;
    CHECK_CODE(ttpu_runtime_create(&opts, &rt), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_runtime_create(NULL, NULL), TTPU_CODE_INVALID_ARGUMENT);

    /* A larger struct_size (a newer caller) is accepted. */
    struct { ttpu_runtime_options_t v1; int64_t future; } bigger;
    memset(&bigger, 0, sizeof bigger);
    bigger.v1.struct_size = sizeof bigger;
    bigger.v1.cpu_device_count = 2;
    CHECK_OK(ttpu_runtime_create(&bigger.v1, &rt));

    CHECK(ttpu_runtime_platform_name(rt) != NULL);
    CHECK(strlen(ttpu_runtime_platform_name(rt)) > 0);
    CHECK(ttpu_runtime_platform_version(rt) != NULL);
    CHECK(ttpu_runtime_platform_name(NULL) == NULL);

    /* The plugin and why it was chosen: run.sh sets VIRTUAL_ENV to the
       project's .venv, where setup installed xla-cpu-pjrt. */
    CHECK(strstr(ttpu_runtime_plugin_path(rt), "xla_cpu_pjrt.so") != NULL);
    CHECK(strncmp(ttpu_runtime_plugin_source(rt), "xla-cpu-pjrt in the Python environment ", 39) == 0);
    CHECK(ttpu_runtime_plugin_path(NULL) == NULL && ttpu_runtime_plugin_source(NULL) == NULL);
    {
        /* $TORCHTPU_PJRT_PLUGIN comes before the environment; one that names
           no file is an error, not a fallback to another plugin. */
        char path[4096];
        snprintf(path, sizeof path, "%s", ttpu_runtime_plugin_path(rt));
        ttpu_runtime_options_t o;
        memset(&o, 0, sizeof o);
        o.struct_size = sizeof o;
        ttpu_runtime_t *other = NULL;
        setenv("TORCHTPU_PJRT_PLUGIN", path, 1);
        CHECK_OK(ttpu_runtime_create(&o, &other));
        CHECK(strcmp(ttpu_runtime_plugin_source(other), "$TORCHTPU_PJRT_PLUGIN") == 0);
        CHECK(strcmp(ttpu_runtime_plugin_path(other), path) == 0);
        ttpu_runtime_destroy(other);
        setenv("TORCHTPU_PJRT_PLUGIN", "/nonexistent/libtpu.so", 1);
        other = NULL;
        CHECK_CODE_MSG(ttpu_runtime_create(&o, &other), TTPU_CODE_NOT_FOUND, "/nonexistent/libtpu.so");
        CHECK(other == NULL);
        unsetenv("TORCHTPU_PJRT_PLUGIN");
    }

    /* Devices. */
    size_t n = 0;
    CHECK_OK(ttpu_runtime_device_count(rt, &n));
    CHECK(n == 2);
    for (size_t i = 0; i < n; i++) {
        const ttpu_device_t *d = NULL;
        CHECK_OK(ttpu_runtime_device(rt, (int64_t)i, &d));
        CHECK(ttpu_device_index(d) == (int64_t)i);
        CHECK(ttpu_device_kind(d) != NULL);
        CHECK(ttpu_device_description(d) != NULL);
        CHECK(ttpu_device_id(d) >= 0);
    }
    const ttpu_device_t *d = NULL;
    CHECK_CODE(ttpu_runtime_device(rt, (int64_t)n, &d), TTPU_CODE_OUT_OF_RANGE);
    CHECK_CODE(ttpu_runtime_device(rt, -1, &d), TTPU_CODE_OUT_OF_RANGE);
    CHECK(d == NULL);
    CHECK(ttpu_device_index(NULL) == -1);
    /* A runtime pointer passed as a device is rejected by its magic. */
    CHECK(ttpu_device_index((const ttpu_device_t *)rt) == -1);

    /* Modes. */
    int32_t old = ttpu_process_mode();
    CHECK(old == TTPU_MODE_DEFER_NEVER);
    CHECK_OK(ttpu_process_set_mode(TTPU_MODE_DEFER_NEVER_AND_LAUNCH_BLOCKING));
    CHECK(ttpu_process_mode() == TTPU_MODE_DEFER_NEVER_AND_LAUNCH_BLOCKING);
    CHECK(ttpu_thread_effective_mode() == TTPU_MODE_DEFER_NEVER_AND_LAUNCH_BLOCKING);
    CHECK_OK(ttpu_thread_set_mode(TTPU_MODE_DEFER_AND_FUSE));
    CHECK(ttpu_thread_effective_mode() == TTPU_MODE_DEFER_AND_FUSE);
    CHECK(ttpu_process_mode() == TTPU_MODE_DEFER_NEVER_AND_LAUNCH_BLOCKING);
    CHECK_OK(ttpu_thread_set_mode(-1));
    CHECK(ttpu_thread_effective_mode() == TTPU_MODE_DEFER_NEVER_AND_LAUNCH_BLOCKING);
    CHECK_CODE_MSG(ttpu_process_set_mode(7), TTPU_CODE_INVALID_ARGUMENT, "unknown execution mode");
    CHECK_CODE(ttpu_process_set_mode(-1), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_thread_set_mode(3), TTPU_CODE_INVALID_ARGUMENT);
    CHECK(ttpu_thread_mode() == -1);
    CHECK_OK(ttpu_process_set_mode(old));
    CHECK(ttpu_process_mode() == old);

    /* The names before API 1.7 still work, as deprecated aliases. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    CHECK_OK(ttpu_set_mode(TTPU_MODE_DEFER_AND_FUSE));
    CHECK(ttpu_get_mode() == TTPU_MODE_DEFER_AND_FUSE && ttpu_process_mode() == TTPU_MODE_DEFER_AND_FUSE);
    CHECK_OK(ttpu_set_thread_mode(TTPU_MODE_DEFER_NEVER));
    CHECK(ttpu_current_mode() == TTPU_MODE_DEFER_NEVER && ttpu_thread_mode() == TTPU_MODE_DEFER_NEVER);
    CHECK_CODE(ttpu_set_thread_mode(3), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_OK(ttpu_set_thread_mode(-1));
    CHECK_OK(ttpu_set_mode(old));
#pragma GCC diagnostic pop
    CHECK(ttpu_process_mode() == old);

    /* Stats: struct_size checked, fields filled. */
    ttpu_stats_t st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st - 8;
    CHECK_CODE(ttpu_runtime_stats(rt, &st), TTPU_CODE_INVALID_ARGUMENT);
    st.struct_size = sizeof st;
    CHECK_OK(ttpu_runtime_stats(rt, &st));
    CHECK(st.struct_size == sizeof st);
    CHECK_CODE(ttpu_runtime_stats(rt, NULL), TTPU_CODE_INVALID_ARGUMENT);

    /* Memory, sync, seed, cache. */
    int64_t live = -1, peak = -1;
    CHECK_OK(ttpu_runtime_memory(rt, 0, &live, &peak));
    CHECK(live >= 0 && peak >= live);
    CHECK_CODE(ttpu_runtime_memory(rt, 0, &live, NULL), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_OK(ttpu_runtime_synchronize(rt));
    CHECK_OK(ttpu_runtime_manual_seed(rt, 42));
    CHECK_OK(ttpu_runtime_reset_peak_memory(rt, 0));
    CHECK_OK(ttpu_runtime_memory(rt, 0, &live, &peak));
    CHECK(peak == live);
    CHECK_CODE(ttpu_runtime_reset_peak_memory(rt, 99), TTPU_CODE_OUT_OF_RANGE);

    /* Generator state: seeding resets the draw count; a restored state
     * repeats the draws that followed it. */
    uint64_t seed = 0, calls = 7;
    CHECK_OK(ttpu_runtime_rng_state(rt, 0, &seed, &calls));
    CHECK(seed == 42 && calls == 0);
    CHECK_OK(ttpu_runtime_set_rng_state(rt, 0, 5, 3));
    CHECK_OK(ttpu_runtime_rng_state(rt, 0, &seed, &calls));
    CHECK(seed == 5 && calls == 3);
    CHECK_CODE(ttpu_runtime_rng_state(rt, 0, &seed, NULL), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_runtime_set_rng_state(rt, -1, 1, 0), TTPU_CODE_OUT_OF_RANGE);
    CHECK_OK(ttpu_runtime_clear_cache(rt));

    /* Shape buckets: increasing positive lengths; a wild count is refused
     * before the array is read. */
    const int64_t buckets[] = {64, 128, 512};
    const int64_t decreasing[] = {128, 64};
    const int64_t zero[] = {0};
    CHECK_OK(ttpu_runtime_set_shape_buckets(rt, buckets, 3));
    CHECK_CODE_MSG(ttpu_runtime_set_shape_buckets(rt, decreasing, 2), TTPU_CODE_INVALID_ARGUMENT, "must increase");
    CHECK_CODE_MSG(ttpu_runtime_set_shape_buckets(rt, zero, 1), TTPU_CODE_INVALID_ARGUMENT, "positive");
    CHECK_CODE(ttpu_runtime_set_shape_buckets(rt, NULL, 2), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE_MSG(ttpu_runtime_set_shape_buckets(rt, buckets, SIZE_MAX), TTPU_CODE_INVALID_ARGUMENT, "at most 256");
    CHECK_CODE(ttpu_runtime_set_shape_buckets(NULL, buckets, 3), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_OK(ttpu_runtime_set_shape_buckets(rt, NULL, 0));
    /* The bucket of a length: listed lengths first, then powers of two. */
    int64_t bucket = 0;
    CHECK_OK(ttpu_runtime_shape_bucket(rt, 5, &bucket));
    CHECK(bucket == 8);
    CHECK_OK(ttpu_runtime_set_shape_buckets(rt, buckets, 3));
    CHECK_OK(ttpu_runtime_shape_bucket(rt, buckets[0], &bucket));
    CHECK(bucket == buckets[0]);
    CHECK_OK(ttpu_runtime_shape_bucket(rt, buckets[2] + 1, &bucket));
    CHECK(bucket > buckets[2] && (bucket & (bucket - 1)) == 0);
    CHECK_CODE_MSG(ttpu_runtime_shape_bucket(rt, 0, &bucket), TTPU_CODE_INVALID_ARGUMENT, "positive");
    CHECK_CODE(ttpu_runtime_shape_bucket(rt, INT64_MAX, &bucket), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_runtime_shape_bucket(rt, 5, NULL), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_runtime_shape_bucket(NULL, 5, &bucket), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_OK(ttpu_runtime_set_shape_buckets(rt, NULL, 0));

    /* NULL runtimes. */
    CHECK_CODE_MSG(ttpu_runtime_device_count(NULL, &n), TTPU_CODE_INVALID_ARGUMENT, "ttpu_runtime_t is NULL");
    CHECK_CODE(ttpu_runtime_synchronize(NULL), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_runtime_device_count(rt, NULL), TTPU_CODE_INVALID_ARGUMENT);
    ttpu_runtime_destroy(NULL);

    /* Errors: NULL is "no error". */
    CHECK(ttpu_error_code(NULL) == TTPU_CODE_OK);
    CHECK(strcmp(ttpu_error_message(NULL), "") == 0);
    ttpu_error_destroy(NULL);
    /* An error is a checked handle: reading it after destroy says so, and a
     * second destroy is a no-op (it used to be a double free). */
    ttpu_error_t *gone = ttpu_error_create(TTPU_CODE_NOT_FOUND, "gone");
    CHECK(ttpu_error_code(gone) == TTPU_CODE_NOT_FOUND && strcmp(ttpu_error_message(gone), "gone") == 0);
    ttpu_error_destroy(gone);
    CHECK(ttpu_error_code(gone) == TTPU_CODE_INVALID_ARGUMENT);
    CHECK(strstr(ttpu_error_message(gone), "already destroyed") != NULL);
    ttpu_error_destroy(gone);

    /* Use after destroy is detected; a second destroy is a no-op. */
    ttpu_runtime_destroy(rt);
    CHECK_CODE_MSG(ttpu_runtime_device_count(rt, &n), TTPU_CODE_INVALID_ARGUMENT,
                   "ttpu_runtime_t was already destroyed (use after ttpu_runtime_destroy)");
    CHECK(ttpu_runtime_platform_name(rt) == NULL);
    ttpu_runtime_destroy(rt);

    printf("test_runtime: ok\n");
    return 0;
}
