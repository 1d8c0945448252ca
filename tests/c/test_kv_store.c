/* A runtime whose client joins processes: ttpu_runtime_options_t's node
 * fields and kv_store, ttpu_error_create, and who releases the store. The
 * XLA CPU plugin cannot span processes and ignores the store (verified in
 * ARCHITECTURE.md), so here a one-node client must work as usual, bad
 * options must be refused, and the store must be released exactly once. */
#include <stddef.h>

#include "check.h"

typedef struct {
    int released;
} store_t;

static ttpu_error_t *kv_get(void *user, const char *key, size_t key_size, int64_t timeout_ms, char **value,
                            size_t *value_size, ttpu_kv_value_deleter_t *deleter) {
    (void)user, (void)key, (void)key_size, (void)value, (void)value_size, (void)deleter;
    return ttpu_error_create(timeout_ms < 0 ? TTPU_CODE_NOT_FOUND : TTPU_CODE_DEADLINE_EXCEEDED, "no such key");
}

static ttpu_error_t *kv_put(void *user, const char *key, size_t key_size, const char *value, size_t value_size) {
    (void)user, (void)key, (void)key_size, (void)value, (void)value_size;
    return NULL;
}

static void kv_release(void *user) { ((store_t *)user)->released++; }

int main(void) {
    /* ttpu_error_create: code and a copy of the message; OK and unknown
     * codes are UNKNOWN, so an error never reads as success. */
    char msg[] = "rendezvous lost";
    ttpu_error_t *e = ttpu_error_create(TTPU_CODE_UNAVAILABLE, msg);
    msg[0] = 'X';
    CHECK(ttpu_error_code(e) == TTPU_CODE_UNAVAILABLE);
    CHECK(strcmp(ttpu_error_message(e), "rendezvous lost") == 0);
    ttpu_error_destroy(e);
    e = ttpu_error_create(TTPU_CODE_OK, NULL);
    CHECK(ttpu_error_code(e) == TTPU_CODE_UNKNOWN && strcmp(ttpu_error_message(e), "") == 0);
    ttpu_error_destroy(e);
    e = ttpu_error_create(99, "x");
    CHECK(ttpu_error_code(e) == TTPU_CODE_UNKNOWN);
    ttpu_error_destroy(e);

    store_t store = {0};
    ttpu_kv_store_t kv;
    memset(&kv, 0, sizeof kv);
    kv.struct_size = sizeof kv;
    kv.user_data = &store;
    kv.get = kv_get;
    kv.put = kv_put;
    kv.release = kv_release;
    ttpu_runtime_options_t opts;
    memset(&opts, 0, sizeof opts);
    opts.struct_size = sizeof opts;
    opts.kv_store = &kv;
    ttpu_runtime_t *rt = NULL;

    /* A node outside 0..num_nodes: refused, and the store released. */
    opts.node_id = 2;
    opts.num_nodes = 2;
    CHECK_CODE_MSG(ttpu_runtime_create(&opts, &rt), TTPU_CODE_INVALID_ARGUMENT, "node_id 2 is not in 0..num_nodes (2)");
    CHECK(rt == NULL && store.released == 1);
    /* A later failure (a negative device count) releases it too. */
    opts.node_id = 0;
    opts.cpu_device_count = -1;
    CHECK_CODE(ttpu_runtime_create(&opts, &rt), TTPU_CODE_INVALID_ARGUMENT);
    CHECK(store.released == 2);
    /* No put callback: refused before the runtime takes the store. */
    opts.cpu_device_count = 2;
    kv.put = NULL;
    CHECK_CODE_MSG(ttpu_runtime_create(&opts, &rt), TTPU_CODE_INVALID_ARGUMENT, "get and put");
    CHECK(store.released == 2);
    kv.put = kv_put;

    /* A version-1 caller (struct_size before the node fields) never has its
     * kv_store read. */
    opts.struct_size = offsetof(ttpu_runtime_options_t, node_id);
    opts.node_id = 7;
    CHECK_OK(ttpu_runtime_create(&opts, &rt));
    ttpu_runtime_destroy(rt);
    CHECK(store.released == 2);

    /* Node 0 of 1: the client starts and computes; the store is released
     * when the runtime is destroyed, and only then. */
    opts.struct_size = sizeof opts;
    opts.node_id = 0;
    opts.num_nodes = 1;
    CHECK_OK(ttpu_runtime_create(&opts, &rt));
    CHECK(store.released == 2);
    size_t n = 0;
    CHECK_OK(ttpu_runtime_device_count(rt, &n));
    CHECK(n == 2);
    float host[3] = {1.0f, 2.0f, 3.0f};
    int64_t dims[1] = {3};
    ttpu_tensor_t *x = NULL;
    CHECK_OK(ttpu_tensor_from_host(rt, host, sizeof host, TTPU_DTYPE_FLOAT32, dims, 1, 1, &x));
    ttpu_value_t args[2], res[1];
    memset(args, 0, sizeof args);
    args[0].kind = TTPU_VALUE_KIND_TENSOR;
    args[0].ptr = x;
    args[1] = args[0];
    size_t count = 0;
    CHECK_OK(ttpu_op_call(rt, "aten::mul.Tensor", args, 2, res, 1, &count));
    CHECK(count == 1 && res[0].kind == TTPU_VALUE_KIND_TENSOR);
    float out[3] = {0};
    CHECK_OK(ttpu_tensor_to_host(rt, (const ttpu_tensor_t *)res[0].ptr, out, sizeof out));
    CHECK(out[0] == 1.0f && out[1] == 4.0f && out[2] == 9.0f);
    ttpu_tensor_destroy((ttpu_tensor_t *)res[0].ptr);
    ttpu_tensor_destroy(x);
    ttpu_runtime_destroy(rt);
    CHECK(store.released == 3);
    printf("kv store: ok\n");
    return 0;
}
