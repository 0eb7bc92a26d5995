/*
 * kvpool_c: a paged KV-cache block pool in C, speaking the kvpool wire protocol.
 *
 * The reference pool in another language: standard C (C99) only, built with
 *     cc -std=c99 -O2 -o kvpool_c kvpool_c.c
 * and checked with
 *     kvpool conform --target exec:./kvpool_c
 * It reads one JSON message per line on stdin and answers each with one line on stdout
 * (docs: Guide > The wire protocol). It speaks protocol 2 (and 1, to a suite that asks
 * for it): an apply or a batch of actions, each step answered with the whole view. It offers get_new_blocks, free_blocks (with
 * evict_first), touch, cache_full_blocks (with block_mask), get_cached_block,
 * evict_blocks, reset_prefix_cache, is_block_writable, get_usage, get_num_free_blocks and
 * take_events, under the seed profile, and shows its free queue, reference counts, keys
 * and prefix-cache index after every step.
 *
 * The pool: blocks 0..n-1, block 0 the null block (never free, never keyed). The free
 * queue is a ring of prev/next links through a sentinel (index n), so every move is a
 * few link writes with no branch for the ends. A block has at most one key (a block hash
 * and a KV-cache group id; this pool registers no partial entries), stamped when cached:
 * the prefix-cache index is every key with its blocks, earliest stamp first, read off the
 * blocks (a scan: this pool is written to be read, not to be fast).
 *
 * Planted faults, each a real bug class, chosen at compile time (the tests build each
 * and check that the suite catches it):
 *   -DFAULT_DOUBLE_HANDOUT   an allocation of several blocks leaves its last block in the
 *                            free queue, so it is handed out again (safety)
 *   -DFAULT_UNKEYED_TO_BACK  a freed block without a key joins the back of the queue, not
 *                            the front (order)
 *   -DFAULT_ACCEPT_OVERFREE  a block released more times than it is held is not refused
 *                            (robustness)
 */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROTOCOL 2 /* the newest version it speaks; a suite asking for 1 gets 1 */
#define GROUP_HEX 8 /* a key is the block hash followed by the group id, 4 bytes, in hex */

/* --- JSON values ------------------------------------------------------------------- */

enum kind { J_NULL, J_BOOL, J_INT, J_STR, J_ARR, J_OBJ, J_OTHER };

typedef struct json {
    enum kind kind;
    long long num;        /* J_INT, J_BOOL */
    char *str;            /* J_STR */
    struct json **items;  /* J_ARR, J_OBJ (values) */
    char **keys;          /* J_OBJ */
    size_t n;
} json;

typedef struct {
    const char *p;
    const char *error;
    int depth;
} parser;

static json *parse_value(parser *ps);

static json *new_json(enum kind kind) {
    json *j = calloc(1, sizeof *j);
    if (!j) { fprintf(stderr, "out of memory\n"); exit(3); }
    j->kind = kind;
    return j;
}

static void free_json(json *j) {
    size_t i;
    if (!j) return;
    for (i = 0; i < j->n; i++) {
        free_json(j->items[i]);
        if (j->keys) free(j->keys[i]);
    }
    free(j->items);
    free(j->keys);
    free(j->str);
    free(j);
}

static void skip_space(parser *ps) {
    while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\r' || *ps->p == '\n') ps->p++;
}

static char *parse_string(parser *ps) {
    size_t cap = 16, len = 0;
    char *out = malloc(cap);
    ps->p++; /* the opening quote */
    while (*ps->p && *ps->p != '"') {
        char c = *ps->p++;
        if (c == '\\') {
            c = *ps->p++;
            switch (c) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'u': /* kept as '?': names this pool reads are ASCII */
                if (strlen(ps->p) < 4) { ps->error = "a short \\u escape"; free(out); return NULL; }
                ps->p += 4;
                c = '?';
                break;
            case '"': case '\\': case '/': break;
            default: ps->error = "a bad escape"; free(out); return NULL;
            }
        }
        if (len + 2 > cap) out = realloc(out, cap *= 2);
        out[len++] = c;
    }
    if (*ps->p != '"') { ps->error = "an unterminated string"; free(out); return NULL; }
    ps->p++;
    out[len] = '\0';
    return out;
}

static json *parse_container(parser *ps, char close) {
    json *j = new_json(close == ']' ? J_ARR : J_OBJ);
    size_t cap = 0;
    if (++ps->depth > 64) { ps->error = "nesting deeper than 64"; return j; }
    ps->p++;
    skip_space(ps);
    if (*ps->p == close) { ps->p++; ps->depth--; return j; }
    for (;;) {
        char *key = NULL;
        json *value;
        skip_space(ps);
        if (close == '}') {
            if (*ps->p != '"') { ps->error = "an object key that is not a string"; return j; }
            key = parse_string(ps);
            if (!key) return j;
            skip_space(ps);
            if (*ps->p++ != ':') { ps->error = "a missing ':'"; free(key); return j; }
        }
        value = parse_value(ps);
        if (j->n == cap) {
            cap = cap ? 2 * cap : 8;
            j->items = realloc(j->items, cap * sizeof *j->items);
            if (close == '}') j->keys = realloc(j->keys, cap * sizeof *j->keys);
        }
        j->items[j->n] = value;
        if (close == '}') j->keys[j->n] = key;
        j->n++;
        if (ps->error) return j;
        skip_space(ps);
        if (*ps->p == ',') { ps->p++; continue; }
        if (*ps->p == close) { ps->p++; ps->depth--; return j; }
        ps->error = "a missing ',' or closing bracket";
        return j;
    }
}

static json *parse_value(parser *ps) {
    json *j;
    skip_space(ps);
    switch (*ps->p) {
    case '{': return parse_container(ps, '}');
    case '[': return parse_container(ps, ']');
    case '"':
        j = new_json(J_STR);
        j->str = parse_string(ps);
        return j;
    case 't': case 'f': case 'n': {
        const char *words[] = {"true", "false", "null"};
        int w = *ps->p == 't' ? 0 : *ps->p == 'f' ? 1 : 2;
        if (strncmp(ps->p, words[w], strlen(words[w])) != 0) { ps->error = "a bad literal"; return new_json(J_NULL); }
        ps->p += strlen(words[w]);
        j = new_json(w == 2 ? J_NULL : J_BOOL);
        j->num = w == 0;
        return j;
    }
    default: {
        char *end;
        long long value = strtoll(ps->p, &end, 10);
        if (end == ps->p) { ps->error = "not a JSON value"; return new_json(J_NULL); }
        j = new_json(J_INT);
        if (*end == '.' || *end == 'e' || *end == 'E') { /* a number this pool never reads */
            j->kind = J_OTHER;
            strtod(ps->p, &end);
        }
        j->num = value;
        ps->p = end;
        return j;
    }
    }
}

static json *get(const json *object, const char *key) {
    size_t i;
    if (!object || object->kind != J_OBJ) return NULL;
    for (i = 0; i < object->n; i++)
        if (strcmp(object->keys[i], key) == 0) return object->items[i];
    return NULL;
}

/* An integer field; {"#bigint": "..."} (beyond 2**53) reads as out of every range. */
static int get_int(const json *object, const char *key, long long *out) {
    const json *v = get(object, key);
    if (v && v->kind == J_INT) { *out = v->num; return 1; }
    if (v && get(v, "#bigint")) { *out = (long long)1 << 62; return 1; }
    return 0;
}

/* --- output ------------------------------------------------------------------------ */

typedef struct {
    char *text;
    size_t len, cap;
} buffer;

static buffer out;

static void put(const char *format, ...) {
    va_list args;
    int need;
    for (;;) {
        va_start(args, format);
        need = vsnprintf(out.text + out.len, out.cap - out.len, format, args);
        va_end(args);
        if (need >= 0 && (size_t)need < out.cap - out.len) { out.len += (size_t)need; return; }
        out.cap = 2 * out.cap + (size_t)need + 64;
        out.text = realloc(out.text, out.cap);
    }
}

static void put_json_string(const char *s) {
    put("\"");
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') put("\\%c", *s);
        else if ((unsigned char)*s < 0x20) put("\\u%04x", *s);
        else put("%c", *s);
    }
    put("\"");
}

/* --- the pool ---------------------------------------------------------------------- */

typedef struct {
    long long n;          /* blocks, the null block 0 included */
    int caching, events_on;
    long long hash_block_size;
    long long *ref_cnt;
    long long *prev, *next; /* the free queue: a ring through the sentinel n */
    char **key;           /* the block's key in hex (hash then group), or NULL */
    long long *key_tokens; /* how many prefix tokens the key covers */
    long long *stamp;     /* when the key was cached: lookups find the earliest */
    long long clock;
    long long free_count;
    buffer events;        /* pending events, as ITF records separated by commas */
} pool;

static pool P;

static void free_pool(void) {
    long long b;
    for (b = 0; b < P.n; b++) free(P.key[b]);
    free(P.ref_cnt); free(P.prev); free(P.next); free(P.key); free(P.key_tokens); free(P.stamp);
    free(P.events.text);
    memset(&P, 0, sizeof P);
}

static int in_queue(long long b) { return P.next[b] >= 0; }

/* Link b between a and a's successor (invariant: the ring stays closed). */
static void link_after(long long a, long long b) {
    P.prev[b] = a;
    P.next[b] = P.next[a];
    P.prev[P.next[a]] = b;
    P.next[a] = b;
    P.free_count++;
}

static void unlink_block(long long b) {
    P.next[P.prev[b]] = P.next[b];
    P.prev[P.next[b]] = P.prev[b];
    P.next[b] = P.prev[b] = -1;
    P.free_count--;
}

static void new_pool(long long n, int caching, long long hbs, int events_on) {
    long long b;
    free_pool();
    P.n = n;
    P.caching = caching;
    P.hash_block_size = hbs;
    P.events_on = events_on;
    P.ref_cnt = calloc((size_t)n, sizeof *P.ref_cnt);
    P.prev = malloc((size_t)(n + 1) * sizeof *P.prev);
    P.next = malloc((size_t)(n + 1) * sizeof *P.next);
    P.key = calloc((size_t)n, sizeof *P.key);
    P.key_tokens = calloc((size_t)n, sizeof *P.key_tokens);
    P.stamp = calloc((size_t)n, sizeof *P.stamp);
    P.prev[n] = P.next[n] = n;
    P.next[0] = P.prev[0] = -1;
    for (b = 1; b < n; b++) link_after(P.prev[n], b);
}

static void event(const char *format, ...) {
    va_list args;
    buffer saved;
    if (!P.events_on) return;
    saved = out;
    out = P.events;
    if (out.len) put(",");
    va_start(args, format);
    {
        char line[1024];
        int need = vsnprintf(line, sizeof line, format, args);
        if (need >= 0 && (size_t)need < sizeof line) put("%s", line);
    }
    va_end(args);
    P.events = out;
    out = saved;
}

/* A key's hash part (its hex without the group's 8 digits) and group id. */
static void removed_event(const char *key) {
    size_t len = strlen(key);
    buffer saved = out;
    if (!P.events_on) return;
    out = P.events;
    if (out.len) put(",");
    put("{\"kind\":\"BlockRemoved\",\"block_hash\":\"%.*s\",\"group_id\":%lld}",
        (int)(len - GROUP_HEX), key, strtoll(key + len - GROUP_HEX, NULL, 16));
    P.events = out;
    out = saved;
}

static void strip_key(long long b) {
    if (!P.key[b]) return;
    removed_event(P.key[b]);
    free(P.key[b]);
    P.key[b] = NULL;
}

static char *make_key(const char *hash, long long group) {
    char *key = malloc(strlen(hash) + GROUP_HEX + 1);
    sprintf(key, "%s%08llx", hash, group);
    return key;
}

/* The block cached earliest under key, or -1. */
static long long lookup(const char *key) {
    long long b, found = -1;
    for (b = 1; b < P.n; b++)
        if (P.key[b] && strcmp(P.key[b], key) == 0 && (found < 0 || P.stamp[b] < P.stamp[found]))
            found = b;
    return found;
}

/* --- operations: each refuses (a reason, nothing changed) or acts and answers ------ */

static const char *refusal;
static char reason[256];

static int refuse(const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(reason, sizeof reason, format, args);
    va_end(args);
    refusal = reason;
    return 0;
}

/* The ids of list field `name` into ids (at most cap); -1 if it is not a list of ints. */
static long long read_ids(const json *action, const char *name, long long **ids) {
    const json *list = get(action, name);
    size_t i;
    if (!list || list->kind != J_ARR) return -1;
    *ids = malloc((list->n + 1) * sizeof **ids);
    for (i = 0; i < list->n; i++) {
        if (list->items[i]->kind != J_INT) return -1;
        (*ids)[i] = list->items[i]->num;
    }
    return (long long)list->n;
}

static int ids_in_range(const long long *ids, long long count) {
    long long i;
    for (i = 0; i < count; i++)
        if (ids[i] < 0 || ids[i] >= P.n)
            return refuse("block-id-range: block %lld is not in 0..%lld", ids[i], P.n - 1);
    return 1;
}

static void get_new_blocks(const json *a) {
    long long n = -1, i, b;
    if (!get_int(a, "num_blocks", &n) || n < 0 || n > P.free_count) {
        refuse("get-new-blocks-count: asked for %lld blocks with %lld free", n, P.free_count);
        return;
    }
    put("{\"tag\":\"Blocks\",\"value\":[");
    for (i = 0; i < n; i++) {
        b = P.next[P.n];
        unlink_block(b);
#ifdef FAULT_DOUBLE_HANDOUT
        if (i == n - 1 && n >= 2) link_after(P.n, b); /* left at the front: handed out again */
#endif
        if (P.caching) strip_key(b);
        P.ref_cnt[b] = 1;
        put("%s%lld", i ? "," : "", b);
    }
    put("]}");
}

static void free_blocks(const json *a) {
    long long *ids = NULL, *foreign = NULL, count, nforeign, i, b;
    long long *reached, nreached = 0;
    const json *evict = get(a, "evict_first");
    int evict_first = evict && evict->kind == J_BOOL && evict->num;
    count = read_ids(a, "blocks", &ids);
    nforeign = get(a, "foreign") ? read_ids(a, "foreign", &foreign) : 0;
    free(foreign);
    if (count < 0 || nforeign < 0) { refuse("blocks: expected a list of block ids"); free(ids); return; }
    if (nforeign > 0) { refuse("foreign-route: this pool has no peer"); free(ids); return; }
    if (!ids_in_range(ids, count)) { free(ids); return; }
#ifndef FAULT_ACCEPT_OVERFREE
    for (i = 0; i < count; i++) { /* a release is a multiset: count each block's listings */
        long long times = 0, j;
        if (ids[i] == 0) continue;
        for (j = 0; j < count; j++) times += ids[j] == ids[i];
        if (times > P.ref_cnt[ids[i]]) {
            refuse("free-held: block %lld is released %lld time(s) but held %lld", ids[i], times,
                   P.ref_cnt[ids[i]]);
            free(ids);
            return;
        }
    }
#endif
    reached = malloc((size_t)(count + 1) * sizeof *reached);
    for (i = 0; i < count; i++) {
        b = ids[i];
        if (b == 0) continue;
        if (--P.ref_cnt[b] == 0) reached[nreached++] = b;
    }
    /* To the front (evict_first, caching off, or no key: reused first), in the given order
       ahead of the old front; the rest (cached: evicted last) behind the old back. */
    {
        long long front = P.n; /* insert after this: the last block put at the front */
        for (i = 0; i < nreached; i++) {
            b = reached[i];
            int to_front = evict_first || !P.caching || !P.key[b];
#ifdef FAULT_UNKEYED_TO_BACK
            to_front = evict_first || !P.caching;
#endif
            if (in_queue(b)) continue; /* an over-free that was let through */
            if (to_front) { link_after(front, b); front = b; }
            else link_after(P.prev[P.n], b);
        }
    }
    free(reached);
    free(ids);
    put("{\"tag\":\"Nothing\",\"value\":{\"#tup\":[]}}");
}

static void touch(const json *a) {
    long long *ids = NULL, count = read_ids(a, "blocks", &ids), i, b;
    if (count < 0) { refuse("blocks: expected a list of block ids"); free(ids); return; }
    if (!ids_in_range(ids, count)) { free(ids); return; }
    for (i = 0; i < count; i++) {
        b = ids[i];
        if (b != 0 && P.ref_cnt[b] == 0 && !P.key[b]) {
            refuse("touch-identity: block %lld is free and carries no key: not a cache hit", b);
            free(ids);
            return;
        }
    }
    for (i = 0; i < count; i++) {
        b = ids[i];
        if (b == 0) continue;
        if (P.ref_cnt[b]++ == 0 && in_queue(b)) unlink_block(b);
    }
    free(ids);
    put("{\"tag\":\"Nothing\",\"value\":{\"#tup\":[]}}");
}

static int caching_allowed(long long block_size, long long group) {
    if (!P.caching) return refuse("caching-enabled: caching is off");
    if (group < 0 || group >= 4294967296LL) return refuse("group-id-range: group id %lld", group);
    if (block_size <= 0 || block_size % P.hash_block_size)
        return refuse("block-size-multiple: block_size %lld with hash_block_size %lld",
                      block_size, P.hash_block_size);
    return 1;
}

static void cache_full_blocks(const json *a) {
    long long *ids = NULL, count, nc, nf, block_size, group = 0, scale, i, j, b, nstored = 0;
    const json *hashes = get(a, "block_hashes"), *mask_variant = get(a, "block_mask");
    const json *mask = NULL;
    long long *chosen, *chosen_index, nchosen = 0;
    count = read_ids(a, "blocks", &ids);
    if (count < 0 || !hashes || hashes->kind != J_ARR || !get_int(a, "num_cached_blocks", &nc) ||
        !get_int(a, "num_full_blocks", &nf) || !get_int(a, "block_size", &block_size)) {
        refuse("cache_full_blocks: a field is missing or of the wrong type");
        free(ids);
        return;
    }
    get_int(a, "group_id", &group);
    for (i = 0; i < (long long)hashes->n; i++)
        if (hashes->items[i]->kind != J_STR) {
            refuse("block_hashes: expected hex strings");
            free(ids);
            return;
        }
    if (mask_variant && get(mask_variant, "tag") && get(mask_variant, "tag")->kind == J_STR &&
        strcmp(get(mask_variant, "tag")->str, "Some") == 0)
        mask = get(mask_variant, "value");
    if (mask && mask->kind != J_ARR) mask = NULL;
    if (!caching_allowed(block_size, group) || !ids_in_range(ids, count)) { free(ids); return; }
    if (!(0 <= nc && nc <= nf && nf <= count)) {
        refuse("cache-range: num_cached_blocks=%lld, num_full_blocks=%lld, %lld blocks", nc, nf, count);
        free(ids);
        return;
    }
    if (mask && (long long)mask->n != nf - nc) {
        refuse("cache-range: block_mask has %zu entries for %lld new full blocks", mask->n, nf - nc);
        free(ids);
        return;
    }
    scale = block_size / P.hash_block_size;
    if (nc < nf && (long long)hashes->n / scale < nf) {
        refuse("hashes-available: %zu hashes do not cover %lld blocks", hashes->n, nf);
        free(ids);
        return;
    }
    chosen = malloc((size_t)(count + 1) * sizeof *chosen);
    chosen_index = malloc((size_t)(count + 1) * sizeof *chosen_index);
    for (i = nc; i < nf; i++) { /* the new full blocks, less null and masked-out ones */
        b = ids[i];
        if (b == 0 || (mask && !mask->items[i - nc]->num)) continue;
        if (P.ref_cnt[b] < 1) { refuse("cache-held: block %lld is not held", b); break; }
        for (j = 0; j < nchosen; j++)
            if (chosen[j] == b) refuse("cache-distinct: block %lld is listed twice", b);
        if (refusal) break;
        if (P.key[b] && P.key_tokens[b] >= (i + 1) * block_size) {
            refuse("cache-fresh: block %lld already has a key covering %lld tokens", b, P.key_tokens[b]);
            break;
        }
        chosen[nchosen] = b;
        chosen_index[nchosen++] = i;
    }
    if (!refusal && nc < nf) {
        buffer saved = out;
        buffer stored = {0};
        for (j = 0; j < nchosen; j++) {
            const char *hash = hashes->items[(chosen_index[j] + 1) * scale - 1]->str;
            b = chosen[j];
            strip_key(b); /* a shorter prefix's key gives way */
            P.key[b] = make_key(hash, group);
            P.key_tokens[b] = (chosen_index[j] + 1) * block_size;
            P.stamp[b] = ++P.clock;
            out = stored;
            put("%s\"%s\"", nstored++ ? "," : "", hash);
            stored = out;
        }
        out = saved;
        if (P.events_on) {
            saved = out;
            out = P.events;
            if (out.len) put(",");
            put("{\"kind\":\"BlockStored\",\"block_hashes\":[%s],\"parent_block_hash\":",
                stored.text ? stored.text : "");
            if (nc > 0) put("{\"tag\":\"Some\",\"value\":\"%s\"}", hashes->items[nc * scale - 1]->str);
            else put("{\"tag\":\"None\",\"value\":{\"#tup\":[]}}");
            put(",\"group_id\":%lld,\"block_size\":%lld,\"num_tokens\":%lld}", group, block_size,
                (nf - nc) * block_size);
            P.events = out;
            out = saved;
        }
        free(stored.text);
    }
    free(chosen);
    free(chosen_index);
    free(ids);
    if (!refusal) put("{\"tag\":\"Nothing\",\"value\":{\"#tup\":[]}}");
}

static void get_cached_block(const json *a) {
    const json *hash = get(a, "block_hash"), *groups = get(a, "group_ids");
    long long *hits;
    size_t i;
    if (!hash || hash->kind != J_STR || !groups || groups->kind != J_ARR) {
        refuse("get_cached_block: a field is missing or of the wrong type");
        return;
    }
    for (i = 0; i < groups->n; i++)
        if (groups->items[i]->num < 0 || groups->items[i]->num >= 4294967296LL) {
            refuse("group-id-range: group id %lld", groups->items[i]->num);
            return;
        }
    hits = malloc((groups->n + 1) * sizeof *hits);
    for (i = 0; i < groups->n; i++) {
        char *key = make_key(hash->str, groups->items[i]->num);
        hits[i] = lookup(key);
        free(key);
        if (hits[i] < 0) { /* one group misses: no hit at all */
            put("{\"tag\":\"Nothing\",\"value\":{\"#tup\":[]}}");
            free(hits);
            return;
        }
    }
    put("{\"tag\":\"Blocks\",\"value\":[");
    for (i = 0; i < groups->n; i++) put("%s%lld", i ? "," : "", hits[i]);
    put("]}");
    free(hits);
}

static void evict_blocks(const json *a) {
    long long *ids = NULL, count = read_ids(a, "block_ids", &ids), i;
    if (count < 0) { refuse("block_ids: expected a list of block ids"); free(ids); return; }
    if (!ids_in_range(ids, count)) { free(ids); return; }
    for (i = 0; i < count; i++) strip_key(ids[i]);
    free(ids);
    put("{\"tag\":\"Nothing\",\"value\":{\"#tup\":[]}}");
}

static void reset_prefix_cache(void) {
    long long b;
    if (P.free_count != P.n - 1) { put("{\"tag\":\"Bool\",\"value\":false}"); return; }
    for (b = 0; b < P.n; b++) { free(P.key[b]); P.key[b] = NULL; }
    event("{\"kind\":\"AllBlocksCleared\"}");
    put("{\"tag\":\"Bool\",\"value\":true}");
}

static void is_block_writable(const json *a) {
    long long b = -1;
    if (!get_int(a, "block", &b) || b < 0 || b >= P.n) {
        refuse("block-id-range: block %lld is not in 0..%lld", b, P.n - 1);
        return;
    }
    put("{\"tag\":\"Bool\",\"value\":%s}", b != 0 && P.ref_cnt[b] == 1 && !P.key[b] ? "true" : "false");
}

static void get_usage(void) {
    double usage = P.n > 1 ? 1.0 - (double)P.free_count / (double)(P.n - 1) : 0.0;
    put("{\"tag\":\"Usage\",\"value\":{\"#unserializable\":\"%.17g\"}}", usage);
}

static void take_events(void) {
    put("{\"tag\":\"Events\",\"value\":[%s]}", P.events.text && P.events.len ? P.events.text : "");
    P.events.len = 0;
    if (P.events.text) P.events.text[0] = '\0';
}

/* --- the view: what the suite compares after every step ---------------------------- */

static int by_key(const void *x, const void *y) {
    long long a = *(const long long *)x, b = *(const long long *)y;
    int c = strcmp(P.key[a], P.key[b]);
    return c ? c : (P.stamp[a] > P.stamp[b]) - (P.stamp[a] < P.stamp[b]);
}

static void put_view(void) {
    long long b, i, nkeyed = 0, *keyed = malloc((size_t)P.n * sizeof *keyed);
    put("{\"free_count\":%lld,\"free_queue\":[", P.free_count);
    for (b = P.next[P.n], i = 0; b != P.n; b = P.next[b], i++) put("%s%lld", i ? "," : "", b);
    put("],\"ref_cnt\":[");
    for (b = 0; b < P.n; b++) put("%s%lld", b ? "," : "", P.ref_cnt[b]);
    put("],\"keys\":[");
    for (b = 0; b < P.n; b++) {
        if (P.key[b]) put("%s{\"#set\":[\"%s\"]}", b ? "," : "", P.key[b]);
        else put("%s{\"#set\":[]}", b ? "," : "");
        if (P.key[b]) keyed[nkeyed++] = b;
    }
    put("],\"primary\":[");
    for (b = 0; b < P.n; b++) {
        if (P.key[b]) put("%s{\"tag\":\"Some\",\"value\":\"%s\"}", b ? "," : "", P.key[b]);
        else put("%s{\"tag\":\"None\",\"value\":{\"#tup\":[]}}", b ? "," : "");
    }
    put("],\"index\":[");
    qsort(keyed, (size_t)nkeyed, sizeof *keyed, by_key); /* keys in byte order, earliest first */
    for (i = 0; i < nkeyed; i++) {
        int first = i == 0 || strcmp(P.key[keyed[i]], P.key[keyed[i - 1]]) != 0;
        int last = i == nkeyed - 1 || strcmp(P.key[keyed[i]], P.key[keyed[i + 1]]) != 0;
        if (first) put("%s{\"#tup\":[\"%s\",[", i ? "," : "", P.key[keyed[i]]);
        put("%s%lld", first ? "" : ",", keyed[i]);
        if (last) put("]]}");
    }
    put("]}");
    free(keyed);
}

/* --- messages ---------------------------------------------------------------------- */

static const char *OPERATIONS =
    "[\"get_new_blocks\",\"free_blocks\",\"free_blocks:evict_first\",\"touch\","
    "\"cache_full_blocks\",\"cache_full_blocks:block_mask\",\"get_cached_block\","
    "\"evict_blocks\",\"reset_prefix_cache\",\"is_block_writable\",\"get_usage\","
    "\"get_num_free_blocks\",\"take_events\"]";
static const char *OBSERVES = "[\"free_queue\",\"ref_cnt\",\"keys\",\"index\",\"events\"]";

static void reply_error(long long id, const char *text) {
    out.len = 0;
    put("{\"type\":\"error\",\"in_reply_to\":%lld,\"text\":", id);
    put_json_string(text);
    put("}");
}

static long long speaks; /* the version agreed in the latest init */

static void init(const json *m, long long id) {
    const json *config = get(m, "config"), *caching = get(config, "enable_caching");
    const json *events_on = get(config, "enable_kv_cache_events");
    long long n, hbs, protocol;
    if (!get_int(m, "protocol", &protocol) || protocol < 1) {
        reply_error(id, "this pool speaks protocols 1 and 2");
        return;
    }
    speaks = protocol < PROTOCOL ? protocol : PROTOCOL;
    if (!get_int(config, "num_gpu_blocks", &n) || n < 1 || !get_int(config, "hash_block_size", &hbs) ||
        hbs < 1 || !caching || !events_on) {
        reply_error(id, "config: expected a PoolConfig record");
        return;
    }
    new_pool(n, (int)caching->num, hbs, (int)events_on->num);
    put("{\"type\":\"init_ok\",\"in_reply_to\":%lld,\"protocol\":%lld,\"name\":\"kvpool_c\","
        "\"profile\":\"seed\",\"operations\":%s,\"observes\":%s,\"view\":",
        id, speaks, OPERATIONS, OBSERVES);
    put_view();
    put("}");
}

/* One step: apply action a and write "outcome":...,"view":...; 0 (an error reply written in
 * place of everything) when the action is not one this pool offers. */
static int step(const json *a, long long id) {
    const json *op = get(a, "operation");
    const char *name;
    if (!op || op->kind != J_STR) { reply_error(id, "action: expected a record with an operation"); return 0; }
    name = op->str;
    refusal = NULL;
    put("\"outcome\":");
    {
        size_t start = out.len;
        put("{\"tag\":\"Returned\",\"value\":{\"result\":");
        if (strcmp(name, "get_new_blocks") == 0) get_new_blocks(a);
        else if (strcmp(name, "free_blocks") == 0) free_blocks(a);
        else if (strcmp(name, "touch") == 0) touch(a);
        else if (strcmp(name, "cache_full_blocks") == 0) cache_full_blocks(a);
        else if (strcmp(name, "get_cached_block") == 0) get_cached_block(a);
        else if (strcmp(name, "evict_blocks") == 0) evict_blocks(a);
        else if (strcmp(name, "reset_prefix_cache") == 0) reset_prefix_cache();
        else if (strcmp(name, "is_block_writable") == 0) is_block_writable(a);
        else if (strcmp(name, "get_usage") == 0) get_usage();
        else if (strcmp(name, "get_num_free_blocks") == 0) put("{\"tag\":\"Int\",\"value\":%lld}", P.free_count);
        else if (strcmp(name, "take_events") == 0) take_events();
        else {
            char text[200];
            snprintf(text, sizeof text, "this pool does not offer %.100s", name);
            reply_error(id, text);
            return 0;
        }
        if (refusal) { /* nothing changed: say why, in place of the result */
            out.len = start;
            put("{\"tag\":\"Refused\",\"value\":");
            put_json_string(refusal);
            put("}");
        } else {
            put(",\"fired\":[]}}");
        }
    }
    put(",\"view\":");
    put_view();
    return 1;
}

static void apply(const json *m, long long id) {
    put("{\"type\":\"applied\",\"in_reply_to\":%lld,", id);
    if (step(get(m, "action"), id)) put("}");
}

/* Protocol 2: several actions, one step each, in order. */
static void batch(const json *m, long long id) {
    const json *actions = get(m, "actions");
    size_t i;
    if (!actions || actions->kind != J_ARR) { reply_error(id, "actions: expected a list"); return; }
    put("{\"type\":\"applied_batch\",\"in_reply_to\":%lld,\"steps\":[", id);
    for (i = 0; i < actions->n; i++) {
        put(i ? ",{" : "{");
        if (!step(actions->items[i], id)) return;
        put("}");
    }
    put("]}");
}

int main(void) {
    size_t cap = 1 << 16, len;
    char *line = malloc(cap);
    out.cap = 1 << 16;
    out.text = malloc(out.cap);
    while (fgets(line, (int)cap, stdin)) {
        parser ps;
        json *m;
        long long id = -1;
        len = strlen(line);
        while (len == cap - 1 && line[len - 1] != '\n') { /* a longer line: read the rest */
            line = realloc(line, cap *= 2);
            if (!fgets(line + len, (int)(cap - len), stdin)) break;
            len += strlen(line + len);
        }
        ps.p = line;
        ps.error = NULL;
        ps.depth = 0;
        m = parse_value(&ps);
        get_int(m, "id", &id);
        out.len = 0;
        if (ps.error) reply_error(id, ps.error);
        else if (get(m, "type") && get(m, "type")->kind == J_STR && strcmp(get(m, "type")->str, "init") == 0)
            init(m, id);
        else if (P.n == 0) reply_error(id, "the first message must be init");
        else if (get(m, "type") && get(m, "type")->kind == J_STR && strcmp(get(m, "type")->str, "apply") == 0)
            apply(m, id);
        else if (speaks >= 2 && get(m, "type") && get(m, "type")->kind == J_STR && strcmp(get(m, "type")->str, "batch") == 0)
            batch(m, id);
        else reply_error(id, "unknown message type");
        put("\n");
        fwrite(out.text, 1, out.len, stdout);
        fflush(stdout);
        free_json(m);
    }
    free_pool();
    free(line);
    free(out.text);
    return 0;
}
