/*
 * Test of the libpaio C API: every exported function, its error paths,
 * concurrent enforcement, rate limiting and thread-local request contexts.
 *
 * Built and run by crates/paio-ffi/tests/c/run.sh, once against libpaio.so
 * and once against libpaio.a. Prints "N passed, 0 failed" on success; on the
 * first failed check it prints what failed and aborts.
 */
#define _DEFAULT_SOURCE
#define _POSIX_C_SOURCE 200809L

#include <paio.h>

#include <errno.h>
#include <inttypes.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int checks_passed = 0;

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (cond) {                                                          \
            checks_passed++;                                                 \
        } else {                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n  last error: %s\n",   \
                    __FILE__, __LINE__, #cond, paio_last_error());           \
            printf("%d passed, 1 failed\n", checks_passed);                  \
            fflush(stdout);                                                  \
            abort();                                                         \
        }                                                                    \
    } while (0)

/* A call that must succeed. */
#define CHECK_OK(call) CHECK((call) == PAIO_OK)

static int contains(const char *haystack, const char *needle) {
    return haystack != NULL && strstr(haystack, needle) != NULL;
}

/*
 * The unsigned number that follows `"field":` after the first occurrence of
 * `anchor` in `json`, or UINT64_MAX if there is none.
 */
static uint64_t json_u64_after(const char *json, const char *anchor, const char *field) {
    char key[128];
    const char *at = strstr(json, anchor);
    if (at == NULL) {
        return UINT64_MAX;
    }
    snprintf(key, sizeof key, "\"%s\":", field);
    at = strstr(at, key);
    if (at == NULL) {
        return UINT64_MAX;
    }
    return strtoull(at + strlen(key), NULL, 10);
}

/* The statistics of a stage, as JSON the caller frees with paio_string_free. */
static char *collect(const paio_stage *stage) {
    char *json = NULL;
    CHECK_OK(paio_stage_collect(stage, &json));
    CHECK(json != NULL);
    return json;
}

static uint64_t channel_figure(const paio_stage *stage, const char *channel, const char *field) {
    char anchor[128];
    char *json = collect(stage);
    uint64_t v;
    snprintf(anchor, sizeof anchor, "{\"name\":\"%s\",", channel);
    v = json_u64_after(json, anchor, field);
    paio_string_free(json);
    return v;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void test_static_text(void) {
    const char *v = paio_version();
    CHECK(v != NULL && v[0] >= '0' && v[0] <= '9');
    CHECK(strcmp(paio_status_str(PAIO_OK), "PAIO_OK") == 0);
    CHECK(strcmp(paio_status_str(PAIO_ERR_INVALID_ARGUMENT), "PAIO_ERR_INVALID_ARGUMENT") == 0);
    CHECK(strcmp(paio_status_str(PAIO_ERR_POLICY), "PAIO_ERR_POLICY") == 0);
    CHECK(strcmp(paio_status_str(PAIO_ERR_RULE), "PAIO_ERR_RULE") == 0);
    CHECK(strcmp(paio_status_str(PAIO_ERR_ENFORCE), "PAIO_ERR_ENFORCE") == 0);
    CHECK(strcmp(paio_status_str(PAIO_ERR_PANIC), "PAIO_ERR_PANIC") == 0);
    CHECK(strcmp(paio_status_str(PAIO_ERR_LIMIT), "PAIO_ERR_LIMIT") == 0);
    CHECK(strcmp(paio_status_str(-1), "PAIO_UNKNOWN_STATUS") == 0);
    CHECK(strcmp(paio_status_str(1000), "PAIO_UNKNOWN_STATUS") == 0);
    CHECK(PAIO_OK == 0);
    CHECK(paio_last_error() != NULL);
}

static void test_request_types(void) {
    static const struct {
        const char *name;
        uint16_t id;
    } builtins[] = {
        {"other", PAIO_REQ_OTHER},         {"read", PAIO_REQ_READ},
        {"write", PAIO_REQ_WRITE},         {"open", PAIO_REQ_OPEN},
        {"close", PAIO_REQ_CLOSE},         {"fsync", PAIO_REQ_FSYNC},
        {"fdatasync", PAIO_REQ_FDATASYNC}, {"sync_file_range", PAIO_REQ_SYNC_FILE_RANGE},
        {"stat", PAIO_REQ_STAT},           {"unlink", PAIO_REQ_UNLINK},
        {"rename", PAIO_REQ_RENAME},       {"mkdir", PAIO_REQ_MKDIR},
        {"rmdir", PAIO_REQ_RMDIR},         {"truncate", PAIO_REQ_TRUNCATE},
        {"fallocate", PAIO_REQ_FALLOCATE}, {"put", PAIO_REQ_PUT},
        {"get", PAIO_REQ_GET},             {"delete", PAIO_REQ_DELETE},
        {"scan", PAIO_REQ_SCAN},           {"merge", PAIO_REQ_MERGE},
    };
    size_t i;
    uint16_t id = 0, again = 0;

    CHECK(PAIO_REQ_READ == 1 && PAIO_REQ_WRITE == 2 && PAIO_REQ_MERGE == 19);
    for (i = 0; i < sizeof builtins / sizeof builtins[0]; i++) {
        id = UINT16_MAX;
        CHECK_OK(paio_request_type(builtins[i].name, &id));
        CHECK(id == builtins[i].id);
    }
    CHECK_OK(paio_request_type("c-test-compact", &id));
    CHECK(id >= PAIO_REQ_FIRST_CUSTOM);
    CHECK_OK(paio_request_type("c-test-compact", &again));
    CHECK(again == id);

    CHECK(paio_request_type(NULL, &id) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(contains(paio_last_error(), "NULL"));
    CHECK(paio_request_type("read", NULL) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(paio_request_type("", &id) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(paio_request_type("\xff\xfe", &id) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(contains(paio_last_error(), "UTF-8"));
}

static void test_request_contexts(void) {
    uint16_t flush = 0, again = 0, current = 99, none = 99;

    CHECK_OK(paio_request_context("c-test-flush", &flush));
    CHECK(flush != PAIO_CONTEXT_NONE);
    CHECK_OK(paio_request_context("c-test-flush", &again));
    CHECK(again == flush);
    CHECK_OK(paio_request_context("none", &none));
    CHECK(none == PAIO_CONTEXT_NONE);
    CHECK(paio_request_context(NULL, &again) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(paio_request_context("x", NULL) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(paio_request_context("", &again) == PAIO_ERR_INVALID_ARGUMENT);

    CHECK_OK(paio_get_request_context(&current));
    CHECK(current == PAIO_CONTEXT_NONE);
    CHECK_OK(paio_set_request_context(flush));
    CHECK_OK(paio_get_request_context(&current));
    CHECK(current == flush);
    CHECK_OK(paio_clear_request_context());
    CHECK_OK(paio_get_request_context(&current));
    CHECK(current == PAIO_CONTEXT_NONE);
    CHECK_OK(paio_set_request_context_name("c-test-flush"));
    CHECK_OK(paio_get_request_context(&current));
    CHECK(current == flush);
    CHECK_OK(paio_set_request_context(PAIO_CONTEXT_NONE));
    CHECK_OK(paio_get_request_context(&current));
    CHECK(current == PAIO_CONTEXT_NONE);

    /* Errors leave the thread's context unchanged. */
    CHECK(paio_set_request_context(65535) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(contains(paio_last_error(), "65535"));
    CHECK(paio_set_request_context_name(NULL) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(paio_set_request_context_name("") == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(paio_set_request_context_name("\xff") == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(paio_get_request_context(NULL) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK_OK(paio_get_request_context(&current));
    CHECK(current == PAIO_CONTEXT_NONE);
}

static void test_contexts(void) {
    paio_context a, b, c;
    uint16_t flush = 0;

    CHECK_OK(paio_request_context("c-test-flush", &flush));
    CHECK_OK(paio_context_new(PAIO_REQ_WRITE, 4096, &a));
    CHECK(a.request_type == PAIO_REQ_WRITE && a.size == 4096);
    CHECK(a.request_context == PAIO_CONTEXT_NONE);
    CHECK(a.workflow != 0);

    CHECK_OK(paio_set_request_context(flush));
    CHECK_OK(paio_context_new(PAIO_REQ_READ, 1, &b));
    CHECK(b.request_context == flush);
    CHECK(b.workflow == a.workflow); /* same thread, same workflow */
    CHECK_OK(paio_clear_request_context());

    CHECK_OK(paio_context_explicit(42, PAIO_REQ_GET, flush, 7, &c));
    CHECK(c.workflow == 42 && c.request_type == PAIO_REQ_GET);
    CHECK(c.request_context == flush && c.size == 7);

    CHECK(paio_context_new(PAIO_REQ_READ, 1, NULL) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(paio_context_new(999, 1, &a) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(contains(paio_last_error(), "999"));
    CHECK(paio_context_explicit(1, 999, 0, 0, &c) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(paio_context_explicit(1, PAIO_REQ_READ, 65535, 0, &c) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(paio_context_explicit(1, PAIO_REQ_READ, 0, 0, NULL) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(c.workflow == 42); /* unchanged on error */
    CHECK(c.file_class == PAIO_FILE_CLASS_NONE);
}

static const char *FILE_CLASS_POLICY =
    "[stage]\n"
    "default_channel = \"other\"\n"
    "[[channel]]\n"
    "name = \"logs\"\n"
    "match = { file_class = \"c-test-logs\" }\n"
    "[[channel]]\n"
    "name = \"other\"\n";

static void test_file_classes(void) {
    uint16_t logs = 0, again = 0, none = 1;
    paio_stage *s = NULL;
    paio_context ctx;

    CHECK_OK(paio_file_class("c-test-logs", &logs));
    CHECK(logs != PAIO_FILE_CLASS_NONE);
    CHECK_OK(paio_file_class("c-test-logs", &again));
    CHECK(again == logs);
    CHECK_OK(paio_file_class("none", &none));
    CHECK(none == PAIO_FILE_CLASS_NONE);
    CHECK(paio_file_class(NULL, &again) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(paio_file_class("x", NULL) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(paio_file_class("", &again) == PAIO_ERR_INVALID_ARGUMENT);

    CHECK_OK(paio_stage_from_policy(FILE_CLASS_POLICY, "classes.toml", &s));
    CHECK_OK(paio_context_new(PAIO_REQ_WRITE, 100, &ctx));
    CHECK_OK(paio_stage_enforce(s, &ctx, NULL, 0, NULL));
    ctx.file_class = logs;
    CHECK_OK(paio_stage_enforce(s, &ctx, NULL, 0, NULL));
    CHECK_OK(paio_stage_enforce(s, &ctx, NULL, 0, NULL));
    CHECK(channel_figure(s, "logs", "bytes") == 200);
    CHECK(channel_figure(s, "other", "bytes") == 100);
    ctx.file_class = 65535; /* never returned by paio_file_class */
    CHECK(paio_stage_enforce(s, &ctx, NULL, 0, NULL) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(contains(paio_last_error(), "file class"));
    paio_stage_free(s);
}

static const char *BAD_POLICY =
    "[[channel]]\n"
    "name = \"a\"\n"
    "[[channel.object]]\n"
    "name = \"x\"\n"
    "kind = \"drl\"\n"
    "rate = \"fast\"\n";

static const char *GOOD_POLICY =
    "[stage]\n"
    "name = \"c-test\"\n"
    "default_channel = \"fg\"\n"
    "\n"
    "[[channel]]\n"
    "name = \"fg\"\n"
    "\n"
    "[[channel]]\n"
    "name = \"bg\"\n"
    "match = { request_context = \"c-test-flush\" }\n";

static void test_stage_creation(void) {
    paio_stage *s = (paio_stage *)&s; /* not NULL: must be reset on error */
    char path[] = "/tmp/paio-c-test-XXXXXX";
    char *json = NULL;
    FILE *f;
    int fd;

    /* Empty stage with a name. */
    CHECK_OK(paio_stage_new("empty", &s));
    CHECK(s != NULL);
    CHECK(paio_last_error()[0] == '\0'); /* a success clears the message */
    CHECK_OK(paio_stage_info(s, &json));
    CHECK(contains(json, "\"name\":\"empty\""));
    CHECK(contains(json, "\"channels\":[]"));
    paio_string_free(json);
    paio_stage_free(s);

    s = (paio_stage *)&s;
    CHECK(paio_stage_new(NULL, &s) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(s == NULL);
    CHECK(contains(paio_last_error(), "name is NULL"));
    CHECK(paio_stage_new("x", NULL) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(paio_stage_new("bad\xff", &s) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(contains(paio_last_error(), "UTF-8"));
    CHECK(s == NULL);
    /* Names reach paiod, `paio status` and logs: checked as PAIO_STAGE_NAME. */
    CHECK(paio_stage_new("", &s) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(contains(paio_last_error(), "1 to 128 bytes"));
    CHECK(paio_stage_new("a\x1b[2Jb", &s) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(contains(paio_last_error(), "control"));
    CHECK(s == NULL);
    {
        char long_name[300];
        memset(long_name, 'n', sizeof long_name - 1);
        long_name[sizeof long_name - 1] = '\0';
        CHECK(paio_stage_new(long_name, &s) == PAIO_ERR_INVALID_ARGUMENT);
        CHECK(contains(paio_last_error(), "this one 299"));
    }
    /* A call that succeeds leaves errno as it found it (the board file that
     * exists already made the first stage leave EEXIST). */
    errno = ENOTTY;
    CHECK_OK(paio_stage_new("errno", &s));
    CHECK(errno == ENOTTY);
    paio_stage_free(s);
    CHECK(errno == ENOTTY);

    /* From a policy string; the error names the origin and line 6. */
    s = (paio_stage *)&s;
    CHECK(paio_stage_from_policy(BAD_POLICY, "bad.toml", &s) == PAIO_ERR_POLICY);
    CHECK(s == NULL);
    CHECK(contains(paio_last_error(), "bad.toml:6:"));
    CHECK(contains(paio_last_error(), "rate"));
    CHECK(paio_stage_from_policy(BAD_POLICY, NULL, &s) == PAIO_ERR_POLICY);
    CHECK(contains(paio_last_error(), "<string>:6:"));
    CHECK(paio_stage_from_policy("[[channel]]\nname = 1\n", NULL, &s) == PAIO_ERR_POLICY);
    CHECK(contains(paio_last_error(), ":2:"));
    CHECK(paio_stage_from_policy(NULL, NULL, &s) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(paio_stage_from_policy(GOOD_POLICY, NULL, NULL) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(paio_stage_from_policy(GOOD_POLICY, "\xff", &s) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(paio_stage_from_policy("name = \"\xff\"", NULL, &s) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK_OK(paio_stage_from_policy(GOOD_POLICY, NULL, &s));
    CHECK_OK(paio_stage_info(s, &json));
    CHECK(contains(json, "\"name\":\"c-test\""));
    CHECK(contains(json, "\"default_channel\":\"fg\""));
    paio_string_free(json);
    paio_stage_free(s);

    /* From a policy file. */
    fd = mkstemp(path);
    CHECK(fd >= 0);
    f = fdopen(fd, "w");
    CHECK(f != NULL);
    CHECK(fputs(GOOD_POLICY, f) >= 0);
    CHECK(fclose(f) == 0);
    CHECK_OK(paio_stage_from_policy_file(path, &s));
    CHECK(channel_figure(s, "bg", "ops") == 0);
    paio_stage_free(s);

    f = fopen(path, "w");
    CHECK(f != NULL);
    CHECK(fputs(BAD_POLICY, f) >= 0);
    CHECK(fclose(f) == 0);
    s = (paio_stage *)&s;
    CHECK(paio_stage_from_policy_file(path, &s) == PAIO_ERR_POLICY);
    CHECK(s == NULL);
    CHECK(contains(paio_last_error(), path));
    CHECK(contains(paio_last_error(), ":6:"));
    CHECK(unlink(path) == 0);

    CHECK(paio_stage_from_policy_file(path, &s) == PAIO_ERR_POLICY); /* gone */
    CHECK(contains(paio_last_error(), "cannot read"));
    CHECK(paio_stage_from_policy_file(NULL, &s) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(paio_stage_from_policy_file(path, NULL) == PAIO_ERR_INVALID_ARGUMENT);

    /* The free functions ignore NULL. */
    paio_stage_free(NULL);
    paio_string_free(NULL);
    paio_outcome_free(NULL);
}

static void test_rules_and_json(void) {
    paio_stage *s = NULL;
    char *json = (char *)&s; /* not NULL: must be reset on error */

    CHECK_OK(paio_stage_new("rules", &s));
    CHECK_OK(paio_stage_apply(s, "{\"rule\":\"create_channel\",\"name\":\"bg\"}"));
    CHECK(paio_last_error()[0] == '\0');

    /* Bad JSON, unknown rule, unknown channel, duplicate name. */
    CHECK(paio_stage_apply(s, "{\"rule\":\"create_channel\",") == PAIO_ERR_RULE);
    CHECK(contains(paio_last_error(), "invalid rule JSON"));
    CHECK(paio_stage_apply(s, "{\"rule\":\"explode\"}") == PAIO_ERR_RULE);
    CHECK(contains(paio_last_error(), "explode"));
    CHECK(paio_stage_apply(s, "{\"rule\":\"map_channel\",\"channel\":\"nope\"}") == PAIO_ERR_RULE);
    CHECK(contains(paio_last_error(), "no channel named \"nope\""));
    CHECK(paio_stage_apply(s, "{\"rule\":\"create_channel\",\"name\":\"bg\"}") == PAIO_ERR_RULE);
    CHECK(contains(paio_last_error(), "exists already"));
    CHECK(paio_stage_apply(s, "{\"rule\":\"create_channel\",\"name\":\"\xff\"}") ==
          PAIO_ERR_INVALID_ARGUMENT);
    CHECK(contains(paio_last_error(), "UTF-8"));
    CHECK(paio_stage_apply(NULL, "{}") == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(paio_stage_apply(s, NULL) == PAIO_ERR_INVALID_ARGUMENT);

    /* Collect and info: NULL arguments, then the real thing. */
    CHECK(paio_stage_collect(NULL, &json) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(json == NULL);
    CHECK(paio_stage_collect(s, NULL) == PAIO_ERR_INVALID_ARGUMENT);
    json = (char *)&s;
    CHECK(paio_stage_info(NULL, &json) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(json == NULL);
    CHECK(paio_stage_info(s, NULL) == PAIO_ERR_INVALID_ARGUMENT);

    CHECK_OK(paio_stage_collect(s, &json));
    CHECK(contains(json, "\"stage\":\"rules\""));
    CHECK(contains(json, "{\"name\":\"bg\",\"ops\":0,"));
    CHECK(contains(json, "\"unmatched\":{\"ops\":0,"));
    paio_string_free(json);
    CHECK_OK(paio_stage_info(s, &json));
    CHECK(contains(json, "{\"name\":\"bg\",\"objects\":[{\"name\":\"default\""));
    paio_string_free(json);
    paio_stage_free(s);
}

static void test_enforce_single_thread(void) {
    paio_stage *s = NULL;
    paio_context ctx;
    paio_outcome out;
    uint16_t flush = 0;
    char buf[64];

    memset(buf, 'x', sizeof buf);
    CHECK_OK(paio_request_context("c-test-flush", &flush));
    CHECK_OK(paio_stage_from_policy(GOOD_POLICY, "good.toml", &s));

    /* Without a request context: the default channel fg. */
    CHECK_OK(paio_context_new(PAIO_REQ_WRITE, sizeof buf, &ctx));
    out.waited_ns = 123;
    out.data = (uint8_t *)buf;
    out.len = 5;
    CHECK_OK(paio_stage_enforce(s, &ctx, buf, sizeof buf, &out));
    CHECK(out.data == NULL && out.len == 0); /* not transformed, not copied */
    CHECK(out.waited_ns == 0);
    paio_outcome_free(&out); /* harmless on an untransformed outcome */
    CHECK_OK(paio_stage_enforce(s, &ctx, NULL, 0, NULL));
    CHECK(channel_figure(s, "fg", "ops") == 2);
    CHECK(channel_figure(s, "fg", "bytes") == 2 * sizeof buf);
    CHECK(channel_figure(s, "bg", "ops") == 0);

    /* The thread's request context routes to bg, by id and by name. */
    CHECK_OK(paio_set_request_context(flush));
    CHECK_OK(paio_context_new(PAIO_REQ_WRITE, 10, &ctx));
    CHECK_OK(paio_stage_enforce(s, &ctx, NULL, 0, &out));
    CHECK_OK(paio_clear_request_context());
    CHECK_OK(paio_set_request_context_name("c-test-flush"));
    CHECK_OK(paio_context_new(PAIO_REQ_READ, 10, &ctx));
    CHECK_OK(paio_stage_enforce(s, &ctx, NULL, 0, &out));
    CHECK_OK(paio_clear_request_context());
    CHECK(channel_figure(s, "bg", "ops") == 2);
    CHECK(channel_figure(s, "bg", "bytes") == 20);
    /* After clearing, back to fg. */
    CHECK_OK(paio_context_new(PAIO_REQ_READ, 1, &ctx));
    CHECK_OK(paio_stage_enforce(s, &ctx, NULL, 0, &out));
    CHECK(channel_figure(s, "fg", "ops") == 3);
    /* An explicit context needs no thread state. */
    CHECK_OK(paio_context_explicit(7, PAIO_REQ_READ, flush, 3, &ctx));
    CHECK_OK(paio_stage_enforce(s, &ctx, NULL, 0, &out));
    CHECK(channel_figure(s, "bg", "ops") == 3);

    /* Errors count nothing. */
    CHECK(paio_stage_enforce(NULL, &ctx, NULL, 0, &out) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(paio_stage_enforce(s, NULL, NULL, 0, &out) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(paio_stage_enforce(s, &ctx, NULL, 10, &out) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(contains(paio_last_error(), "data is NULL"));
    ctx.request_type = 999;
    CHECK(paio_stage_enforce(s, &ctx, NULL, 0, &out) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(contains(paio_last_error(), "unknown request type id 999"));
    ctx.request_type = PAIO_REQ_READ;
    ctx.request_context = 65535;
    CHECK(paio_stage_enforce(s, &ctx, NULL, 0, &out) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(channel_figure(s, "fg", "ops") == 3);
    CHECK(channel_figure(s, "bg", "ops") == 3);
    paio_stage_free(s);
}

struct worker {
    const paio_stage *stage;
    int index;
    int requests;
    int failures;
};

/* Even workers run under the flush request context (channel bg), odd ones
 * under none (channel fg); every request has size 100 + index. */
static void *worker_main(void *arg) {
    struct worker *w = (struct worker *)arg;
    paio_context ctx;
    int i;

    if (w->index % 2 == 0 && paio_set_request_context_name("c-test-flush") != PAIO_OK) {
        w->failures++;
    }
    for (i = 0; i < w->requests; i++) {
        /* Built per request so it reflects this thread's state. */
        if (paio_context_new(PAIO_REQ_WRITE, 100 + (uint64_t)w->index, &ctx) != PAIO_OK ||
            paio_stage_enforce(w->stage, &ctx, NULL, 0, NULL) != PAIO_OK) {
            w->failures++;
        }
    }
    return NULL;
}

static void test_concurrent_enforcement(void) {
    enum { THREADS = 4, REQUESTS = 5000 };
    paio_stage *s = NULL;
    pthread_t threads[THREADS];
    struct worker workers[THREADS];
    char *json;
    int i;

    CHECK_OK(paio_stage_from_policy(GOOD_POLICY, NULL, &s));
    for (i = 0; i < THREADS; i++) {
        workers[i].stage = s;
        workers[i].index = i;
        workers[i].requests = REQUESTS;
        workers[i].failures = 0;
        CHECK(pthread_create(&threads[i], NULL, worker_main, &workers[i]) == 0);
    }
    /* Rules and collections meanwhile do not disturb the requests. */
    CHECK_OK(paio_stage_apply(s, "{\"rule\":\"create_channel\",\"name\":\"spare\"}"));
    json = collect(s);
    paio_string_free(json);
    for (i = 0; i < THREADS; i++) {
        CHECK(pthread_join(threads[i], NULL) == 0);
        CHECK(workers[i].failures == 0);
    }
    /* The main thread's context is untouched by the workers'. */
    {
        uint16_t current = 99;
        CHECK_OK(paio_get_request_context(&current));
        CHECK(current == PAIO_CONTEXT_NONE);
    }
    /* Exact totals: bg got workers 0 and 2, fg workers 1 and 3. */
    json = collect(s);
    CHECK(json_u64_after(json, "{\"name\":\"bg\",", "ops") == 2 * REQUESTS);
    CHECK(json_u64_after(json, "{\"name\":\"bg\",", "bytes") == (uint64_t)REQUESTS * (100 + 102));
    CHECK(json_u64_after(json, "{\"name\":\"fg\",", "ops") == 2 * REQUESTS);
    CHECK(json_u64_after(json, "{\"name\":\"fg\",", "bytes") == (uint64_t)REQUESTS * (101 + 103));
    CHECK(json_u64_after(json, "{\"name\":\"spare\",", "ops") == 0);
    CHECK(json_u64_after(json, "\"unmatched\":", "ops") == 0);
    paio_string_free(json);
    paio_stage_free(s);
}

static void test_rate_limit(void) {
    enum { REQUESTS = 11 };
    paio_stage *s = NULL;
    paio_context ctx;
    paio_outcome out;
    uint64_t waited_ns = 0;
    double start, elapsed;
    char *json = NULL;
    int i;

    CHECK_OK(paio_stage_new("limited", &s));
    CHECK_OK(paio_stage_apply(s, "{\"rule\":\"create_channel\",\"name\":\"slow\"}"));
    CHECK_OK(paio_stage_apply(s, "{\"rule\":\"create_object\",\"channel\":\"slow\",\"name\":\"limit\","
                                 "\"config\":{\"kind\":\"drl\",\"rate\":\"100 ops/s\",\"burst\":1}}"));
    CHECK_OK(paio_stage_apply(s, "{\"rule\":\"set_default_object\",\"channel\":\"slow\",\"object\":\"limit\"}"));
    CHECK_OK(paio_stage_apply(s, "{\"rule\":\"set_default_channel\",\"channel\":\"slow\"}"));
    CHECK(paio_stage_apply(s, "{\"rule\":\"configure\",\"channel\":\"slow\",\"object\":\"nope\","
                              "\"config\":{\"kind\":\"noop\"}}") == PAIO_ERR_RULE);
    CHECK(contains(paio_last_error(), "no object named \"nope\""));

    /* 100 ops/s with a burst of one token: 11 requests need at least 10
     * tokens to accrue, i.e. at least 100 ms. Only a lower bound is checked. */
    CHECK_OK(paio_context_new(PAIO_REQ_FSYNC, 0, &ctx));
    start = now_seconds();
    for (i = 0; i < REQUESTS; i++) {
        CHECK_OK(paio_stage_enforce(s, &ctx, NULL, 0, &out));
        CHECK(out.data == NULL);
        waited_ns += out.waited_ns;
    }
    elapsed = now_seconds() - start;
    CHECK(elapsed >= 0.095);
    CHECK(waited_ns > 0);
    json = collect(s);
    CHECK(json_u64_after(json, "{\"name\":\"limit\",", "ops") == REQUESTS);
    CHECK(json_u64_after(json, "\"wait\":", "waited_ops") >= 1);
    paio_string_free(json);

    /* An enforcement rule changes the rate at run time. */
    CHECK_OK(paio_stage_apply(s, "{\"rule\":\"configure\",\"channel\":\"slow\",\"object\":\"limit\","
                                 "\"config\":{\"kind\":\"drl\",\"rate\":\"1000000 ops/s\"}}"));
    CHECK_OK(paio_stage_info(s, &json));
    CHECK(contains(json, "1000000 ops/s"));
    paio_string_free(json);
    paio_stage_free(s);
}

/* Two phases: admit before the call, complete after it with the bytes
 * moved. Counts bytes moved and latency at completion; a short completion
 * refunds a byte-rate limit; a ticket completes once, on its stage. */
static const char *TWO_PHASE_POLICY =
    "[[channel]]\n"
    "name = \"crit\"\n"
    "match = { criticality = \"critical\" }\n"
    "[[channel]]\n"
    "name = \"bg\"\n"
    "match = { criticality = \"normal\", request_type = \"read\" }\n"
    "default_object = \"p\"\n"
    "[[channel.object]]\n"
    "name = \"p\"\n"
    "kind = \"priority\"\n"
    "depth = 1\n"
    "[[channel]]\n"
    "name = \"limited\"\n"
    "match = { criticality = \"normal\", request_type = \"write\" }\n"
    "default_object = \"l\"\n"
    "[[channel.object]]\n"
    "name = \"l\"\n"
    "kind = \"drl\"\n"
    "rate = \"1000B/s\"\n"
    "burst = 1000\n";

static void test_two_phases(void) {
    paio_stage *s = NULL, *other = NULL;
    paio_context ctx;
    paio_ticket t, copy;
    double start;

    CHECK_OK(paio_stage_from_policy(TWO_PHASE_POLICY, "two-phase.toml", &s));
    CHECK_OK(paio_context_new(PAIO_REQ_READ, 4096, &ctx));
    CHECK(ctx.criticality == PAIO_NORMAL);
    CHECK_OK(paio_stage_admit(s, &ctx, &t));
    CHECK(t.state == PAIO_TICKET_LIVE && t.ctx.size == 4096);
    CHECK(channel_figure(s, "bg", "ops") == 0); /* counted at completion */
    copy = t;
    CHECK_OK(paio_stage_complete(s, &t, 1000));
    CHECK(t.state == 0);
    CHECK(channel_figure(s, "bg", "ops") == 1);
    CHECK(channel_figure(s, "bg", "bytes") == 1000); /* moved, not asked */
    {
        char *json = collect(s);
        /* The call's latency is recorded: one completed request. */
        CHECK(contains(json, "\"latency_total\":{\"ops\":1"));
        paio_string_free(json);
    }
    /* Completed twice (or a copy of a completed ticket's old state): refused. */
    CHECK(paio_stage_complete(s, &t, 0) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(contains(paio_last_error(), "not live"));
    /* On another stage: refused, and the ticket stays live for its own. */
    CHECK_OK(paio_stage_new("other", &other));
    CHECK(paio_stage_complete(other, &copy, 0) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(contains(paio_last_error(), "another stage"));
    paio_stage_free(other);
    CHECK(paio_stage_admit(s, NULL, &t) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(t.state == 0);
    CHECK(paio_stage_complete(s, NULL, 0) == PAIO_ERR_INVALID_ARGUMENT);
    /* A failed call's -1 cast to uint64_t, as a size or as bytes moved: it
     * would put a rate limiter into a debt it never leaves, or wrap the
     * counts. Refused; the ticket stays live. */
    {
        ssize_t failed = -1;
        paio_context huge = ctx;
        huge.size = (uint64_t)failed;
        CHECK(paio_stage_admit(s, &huge, &t) == PAIO_ERR_INVALID_ARGUMENT);
        CHECK(contains(paio_last_error(), "SSIZE_MAX"));
        CHECK(paio_stage_enforce(s, &huge, NULL, 0, NULL) == PAIO_ERR_INVALID_ARGUMENT);
        CHECK_OK(paio_stage_admit(s, &ctx, &t));
        CHECK(paio_stage_complete(s, &t, (uint64_t)failed) == PAIO_ERR_INVALID_ARGUMENT);
        CHECK(contains(paio_last_error(), "moved is 18446744073709551615"));
        CHECK(t.state == PAIO_TICKET_LIVE);
        CHECK_OK(paio_stage_complete(s, &t, 0));
        CHECK(channel_figure(s, "bg", "bytes") == 1000);
    }
    ctx.criticality = 7;
    CHECK(paio_stage_admit(s, &ctx, &t) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(contains(paio_last_error(), "criticality 7"));

    /* 1000 B/s, burst 1000: a write of 1000 that moved nothing is refunded,
     * so the next 1000 go at once; without the refund it would wait 1 s. */
    CHECK_OK(paio_context_new(PAIO_REQ_WRITE, 1000, &ctx));
    CHECK_OK(paio_stage_admit(s, &ctx, &t));
    CHECK_OK(paio_stage_complete(s, &t, 0));
    start = now_seconds();
    CHECK_OK(paio_stage_admit(s, &ctx, &t));
    CHECK(now_seconds() - start < 0.5);
    CHECK_OK(paio_stage_complete(s, &t, 1000));
    CHECK(channel_figure(s, "limited", "bytes") == 1000);
    /* An admission that waits (0.1 s for 100 B at 1000 B/s) leaves errno as
     * it found it, whatever the wait's system calls said. */
    CHECK_OK(paio_context_new(PAIO_REQ_WRITE, 100, &ctx));
    errno = ENOTTY;
    CHECK_OK(paio_stage_admit(s, &ctx, &t));
    CHECK(errno == ENOTTY);
    CHECK_OK(paio_stage_complete(s, &t, 100));
    CHECK(errno == ENOTTY);
    paio_stage_free(s);
}

/* A call's latency is measured in time-stamp counter ticks and converted
 * at a rate the process measures itself: 0.3 s between admission and
 * completion is reported as that long, not off by a factor (ticks taken for
 * nanoseconds would be 2-3 GHz times too many). */
static void test_latency_is_reported_at_its_length(void) {
    paio_stage *s = NULL;
    paio_context ctx;
    paio_ticket t;
    struct timespec pause = {0, 300000000};
    char *json;
    uint64_t mean;
    CHECK_OK(paio_stage_from_policy(TWO_PHASE_POLICY, "two-phase.toml", &s));
    CHECK_OK(paio_context_new(PAIO_REQ_READ, 4096, &ctx));
    CHECK_OK(paio_stage_admit(s, &ctx, &t));
    nanosleep(&pause, NULL);
    CHECK_OK(paio_stage_complete(s, &t, 4096));
    json = collect(s);
    mean = json_u64_after(json, "\"latency_total\":{", "mean_ns");
    paio_string_free(json);
    CHECK(mean >= 290000000 && mean < 450000000);
    paio_stage_free(s);
}

/* paio_stage_split_size follows the route: a drl with `split` asks for
 * pieces of non-critical requests larger than a piece, nothing else does. */
static void test_split_size(void) {
    static const char *policy =
        "[[channel]]\n"
        "name = \"bg\"\n"
        "match = { request_type = \"read\" }\n"
        "default_object = \"l\"\n"
        "[[channel.object]]\n"
        "name = \"l\"\n"
        "kind = \"drl\"\n"
        "rate = \"1GiB/s\"\n"
        "split = \"128KiB\"\n";
    paio_stage *s = NULL;
    paio_context ctx;
    uint64_t piece = 99;

    CHECK_OK(paio_stage_from_policy(policy, "split.toml", &s));
    CHECK_OK(paio_context_new(PAIO_REQ_READ, 1 << 20, &ctx));
    CHECK_OK(paio_stage_split_size(s, &ctx, &piece));
    CHECK(piece == 128 << 10);
    ctx.size = 128 << 10; /* not larger than a piece */
    CHECK_OK(paio_stage_split_size(s, &ctx, &piece));
    CHECK(piece == 0);
    ctx.size = 1 << 20;
    ctx.criticality = PAIO_CRITICAL;
    CHECK_OK(paio_stage_split_size(s, &ctx, &piece));
    CHECK(piece == 0);
    CHECK_OK(paio_context_new(PAIO_REQ_WRITE, 1 << 20, &ctx)); /* unmatched */
    piece = 99;
    CHECK_OK(paio_stage_split_size(s, &ctx, &piece));
    CHECK(piece == 0);
    piece = 99;
    CHECK(paio_stage_split_size(s, NULL, &piece) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(piece == 0);
    CHECK(paio_stage_split_size(s, &ctx, NULL) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(paio_stage_split_size(NULL, &ctx, &piece) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(channel_figure(s, "bg", "ops") == 0); /* nothing counted */
    paio_stage_free(s);
}

/* A thread marked critical: its contexts carry PAIO_CRITICAL and route to
 * the criticality = "critical" channel; the process mark covers every
 * thread. */
static void test_criticality_marks(void) {
    paio_stage *s = NULL;
    paio_context ctx;
    paio_ticket t;

    CHECK_OK(paio_stage_from_policy(TWO_PHASE_POLICY, "two-phase.toml", &s));
    CHECK(paio_thread_critical() == 0);
    CHECK_OK(paio_set_thread_critical(1));
    CHECK(paio_thread_critical() == 1);
    CHECK_OK(paio_context_new(PAIO_REQ_READ, 10, &ctx));
    CHECK(ctx.criticality == PAIO_CRITICAL);
    CHECK_OK(paio_stage_admit(s, &ctx, &t));
    CHECK_OK(paio_stage_complete(s, &t, 10));
    CHECK(channel_figure(s, "crit", "ops") == 1);
    CHECK_OK(paio_set_thread_critical(0));
    CHECK_OK(paio_context_new(PAIO_REQ_READ, 10, &ctx));
    CHECK(ctx.criticality == PAIO_NORMAL);
    CHECK_OK(paio_set_process_critical(1));
    CHECK_OK(paio_context_new(PAIO_REQ_READ, 10, &ctx));
    CHECK(ctx.criticality == PAIO_CRITICAL);
    CHECK(paio_thread_critical() == 0); /* the process mark is not the thread's */
    CHECK_OK(paio_set_process_critical(0));
    /* An explicit context is normal unless set. */
    CHECK_OK(paio_context_explicit(1, PAIO_REQ_READ, PAIO_CONTEXT_NONE, 5, &ctx));
    CHECK(ctx.criticality == PAIO_NORMAL);
    ctx.criticality = PAIO_CRITICAL;
    CHECK_OK(paio_stage_admit(s, &ctx, &t));
    CHECK_OK(paio_stage_complete(s, &t, 5));
    CHECK(channel_figure(s, "crit", "ops") == 2);
    paio_stage_free(s);
}

/* A priority object with depth 1 holds a second non-critical admission
 * until the first completes. */
struct admitter {
    const paio_stage *stage;
    volatile int admitted;
};

static void *admit_one(void *arg) {
    struct admitter *a = (struct admitter *)arg;
    paio_context ctx;
    paio_ticket t;
    if (paio_context_new(PAIO_REQ_READ, 1, &ctx) != PAIO_OK ||
        paio_stage_admit(a->stage, &ctx, &t) != PAIO_OK) {
        return NULL;
    }
    __atomic_store_n(&a->admitted, 1, __ATOMIC_SEQ_CST);
    paio_stage_complete(a->stage, &t, 1);
    return NULL;
}

static void test_priority_depth(void) {
    paio_stage *s = NULL;
    paio_context ctx;
    paio_ticket first;
    pthread_t th;
    struct admitter a;
    int i;

    CHECK_OK(paio_stage_from_policy(TWO_PHASE_POLICY, "two-phase.toml", &s));
    CHECK_OK(paio_context_new(PAIO_REQ_READ, 1, &ctx));
    CHECK_OK(paio_stage_admit(s, &ctx, &first));
    a.stage = s;
    a.admitted = 0;
    CHECK(pthread_create(&th, NULL, admit_one, &a) == 0);
    /* Still held after 50 ms (it would go at once without the depth). */
    usleep(50000);
    CHECK(__atomic_load_n(&a.admitted, __ATOMIC_SEQ_CST) == 0);
    CHECK_OK(paio_stage_complete(s, &first, 1));
    for (i = 0; i < 10000 && !__atomic_load_n(&a.admitted, __ATOMIC_SEQ_CST); i++) {
        usleep(1000);
    }
    CHECK(__atomic_load_n(&a.admitted, __ATOMIC_SEQ_CST) == 1);
    CHECK(pthread_join(th, NULL) == 0);
    CHECK(channel_figure(s, "bg", "ops") == 2);
    paio_stage_free(s);
}

/* A minimal paiod written from docs/protocol.md: accepts one stage, reads
 * its hello frame, answers welcome, and expects the stage to report itself
 * connected. */
static int read_full(int fd, void *buf, size_t n) {
    size_t off = 0;
    while (off < n) {
        ssize_t r = read(fd, (char *)buf + off, n - off);
        if (r <= 0) return -1;
        off += (size_t)r;
    }
    return 0;
}

static void test_policy_as(void) {
    const char *policy = "[stage]\nname = \"orig\"\nlabels = { job = \"a\", tier = \"x\" }\n"
                         "[[channel]]\nname = \"c\"\nmatch = {}\n";
    const char *keys[] = {"job", "instance"};
    const char *values[] = {"b", "db1"};
    paio_stage *stage = NULL;
    CHECK_OK(paio_stage_from_policy_as(policy, "p.toml", "renamed", keys, values, 2, &stage));
    char *json = NULL;
    CHECK_OK(paio_stage_info(stage, &json));
    CHECK(contains(json, "\"name\":\"renamed\""));
    CHECK(contains(json, "\"job\":\"b\""));
    CHECK(contains(json, "\"instance\":\"db1\""));
    CHECK(contains(json, "\"tier\":\"x\""));
    paio_string_free(json);
    paio_stage_free(stage);
    /* NULL name keeps the policy's; no labels. */
    CHECK_OK(paio_stage_from_policy_as(policy, NULL, NULL, NULL, NULL, 0, &stage));
    CHECK_OK(paio_stage_info(stage, &json));
    CHECK(contains(json, "\"name\":\"orig\""));
    paio_string_free(json);
    paio_stage_free(stage);
    CHECK(paio_stage_from_policy_as(policy, NULL, "", NULL, NULL, 0, &stage) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(stage == NULL);
    CHECK(paio_stage_from_policy_as(policy, NULL, NULL, NULL, values, 1, &stage) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(contains(paio_last_error(), "NULL"));
    const char *empty_key[] = {""};
    CHECK(paio_stage_from_policy_as(policy, NULL, NULL, empty_key, values, 1, &stage) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(paio_stage_from_policy_as("[[channel]\n", "bad.toml", NULL, NULL, NULL, 0, &stage) == PAIO_ERR_POLICY);
    CHECK(contains(paio_last_error(), "bad.toml:"));
}

static void test_connect(void) {
    paio_stage *stage = NULL;
    CHECK_OK(paio_stage_new("c-connect", &stage));
    CHECK(paio_stage_connected(stage) == 0);
    CHECK(paio_stage_connected(NULL) == 0);
    CHECK(paio_stage_connect(stage, "relative.sock") == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(contains(paio_last_error(), "absolute"));
    CHECK(paio_stage_connect(NULL, NULL) == PAIO_ERR_INVALID_ARGUMENT);
    {
        /* A path no Unix socket can have: said now, not waited on forever. */
        char too_long[200];
        memset(too_long, 's', sizeof too_long - 1);
        too_long[0] = '/';
        too_long[sizeof too_long - 1] = '\0';
        CHECK(paio_stage_connect(stage, too_long) == PAIO_ERR_INVALID_ARGUMENT);
        CHECK(contains(paio_last_error(), "199 bytes, more than a Unix socket's path"));
    }

    char dir[] = "/tmp/paio-c-test-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[128];
    snprintf(path, sizeof path, "%s/paiod.sock", dir);
    int lfd = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(lfd >= 0);
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    CHECK(strlen(path) < sizeof addr.sun_path);
    memcpy(addr.sun_path, path, strlen(path) + 1);
    CHECK(bind(lfd, (struct sockaddr *)&addr, sizeof addr) == 0);
    CHECK(listen(lfd, 1) == 0);

    CHECK_OK(paio_stage_connect(stage, path));
    CHECK(paio_stage_connect(stage, path) == PAIO_ERR_INVALID_ARGUMENT);
    CHECK(contains(paio_last_error(), "paio_stage_connect was called for this stage already"));

    int fd = accept(lfd, NULL, NULL);
    CHECK(fd >= 0);
    unsigned char hdr[4];
    CHECK(read_full(fd, hdr, 4) == 0);
    size_t len = ((size_t)hdr[0] << 24) | ((size_t)hdr[1] << 16) | ((size_t)hdr[2] << 8) | hdr[3];
    CHECK(len > 0 && len < (1u << 20));
    char *hello = malloc(len + 1);
    CHECK(hello != NULL && read_full(fd, hello, len) == 0);
    hello[len] = 0;
    CHECK(contains(hello, "\"type\":\"hello\""));
    CHECK(contains(hello, "\"name\":\"c-connect\""));
    free(hello);
    const char *welcome = "{\"type\":\"welcome\",\"version\":1,\"stage_id\":5,\"period_ms\":100}";
    unsigned char frame[256];
    size_t wl = strlen(welcome);
    frame[0] = 0; frame[1] = 0; frame[2] = (unsigned char)(wl >> 8); frame[3] = (unsigned char)wl;
    memcpy(frame + 4, welcome, wl);
    CHECK(write(fd, frame, wl + 4) == (ssize_t)(wl + 4));
    int connected = 0;
    for (int i = 0; i < 2000 && !connected; i++) {
        connected = paio_stage_connected(stage);
        if (!connected) usleep(5000);
    }
    CHECK(connected == 1);
    /* Freeing the stage ends the session: the fake paiod sees a goodbye. */
    paio_stage_free(stage);
    CHECK(read_full(fd, hdr, 4) == 0);
    close(fd);
    close(lfd);
    unlink(path);
    rmdir(dir);
}

/* A call that fails in a thread-exit destructor, where libpaio's own
 * thread state is gone: its message is lost, but paio_last_error says so
 * instead of "" (which means success). */
static pthread_key_t exit_key;
static int exit_status = -1;
static char exit_message[160];

static void at_thread_exit(void *stage) {
    exit_status = paio_stage_apply((paio_stage *)stage, "not json");
    snprintf(exit_message, sizeof exit_message, "%s", paio_last_error());
}

static void *exiting_thread(void *stage) {
    paio_stage *s = (paio_stage *)stage;
    paio_context ctx;
    /* Touch libpaio's thread state first, as a real thread would. */
    CHECK(paio_stage_apply(s, "not json") == PAIO_ERR_RULE);
    CHECK_OK(paio_context_new(PAIO_REQ_READ, 1, &ctx));
    CHECK(pthread_setspecific(exit_key, stage) == 0);
    return NULL;
}

static void test_error_during_thread_exit(void) {
    paio_stage *s = NULL;
    pthread_t th;
    CHECK_OK(paio_stage_new("exit", &s));
    CHECK(pthread_key_create(&exit_key, at_thread_exit) == 0);
    CHECK(pthread_create(&th, NULL, exiting_thread, s) == 0);
    CHECK(pthread_join(th, NULL) == 0);
    CHECK(exit_status == PAIO_ERR_RULE);
    CHECK(exit_message[0] != '\0');
    CHECK(contains(exit_message, "invalid rule JSON") || contains(exit_message, "thread exit"));
    pthread_key_delete(exit_key);
    paio_stage_free(s);
}

int main(void) {
    test_static_text();
    test_request_types();
    test_request_contexts();
    test_contexts();
    test_file_classes();
    test_stage_creation();
    test_rules_and_json();
    test_enforce_single_thread();
    test_concurrent_enforcement();
    test_rate_limit();
    test_policy_as();
    test_connect();
    test_two_phases();
    test_latency_is_reported_at_its_length();
    test_split_size();
    test_criticality_marks();
    test_priority_depth();
    test_error_during_thread_exit();
    printf("%d passed, 0 failed\n", checks_passed);
    return 0;
}
