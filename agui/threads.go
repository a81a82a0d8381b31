package agui

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A thread is bound to whoever made it: its record is stored under a key
// derived from the authenticated subject ("" for anonymous clients) and
// the threadId, so another subject using the same threadId reaches
// another record — and the orchestrator refuses it the session anyway,
// which is bound to its subject. An anonymous client's threadId is its
// only credential: it must be unguessable (a random UUID, as AG-UI's
// clients make; minAnonymousID). The record (the session's id and follow
// token) is sealed with a key derived from the same subject and threadId,
// so the store — Redis, shared by every node — holds nothing that follows
// a session without the threadId.

// Store holds the threads' sealed records, shared by every node that
// serves /agui. Keys and values are opaque.
type Store interface {
	// Claim stores val under key unless key holds a value, and reports
	// whether it did; the value expires after ttl.
	Claim(ctx context.Context, key string, val []byte, ttl time.Duration) (bool, error)
	// Put stores val under key, replacing what it holds.
	Put(ctx context.Context, key string, val []byte, ttl time.Duration) error
	// Get returns the value under key (and keeps it for ttl more), or nil
	// when there is none.
	Get(ctx context.Context, key string, ttl time.Duration) ([]byte, error)
}

var (
	_ Store = (*MemoryStore)(nil)
	_ Store = (*RedisStore)(nil)
)

// record is what a thread needs to follow its session again.
type record struct {
	SessionID   string `json:"session_id"`
	FollowToken string `json:"follow_token"`
}

// threadKey is the store key of subject's thread, and the key sealing
// its record.
func threadKey(subject, threadID string) (key string, seal [32]byte) {
	id := sha256.Sum256([]byte("baton agui thread\x00" + subject + "\x00" + threadID))
	return "baton:agui:" + hex.EncodeToString(id[:]), sha256.Sum256([]byte("baton agui seal\x00" + subject + "\x00" + threadID))
}

func sealRecord(key [32]byte, r record) ([]byte, error) {
	gcm, err := newGCM(key)
	if err != nil {
		return nil, err
	}
	plain, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, gcm.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return gcm.Seal(nonce, nonce, plain, nil), nil
}

func openRecord(key [32]byte, sealed []byte) (record, error) {
	var r record
	gcm, err := newGCM(key)
	if err != nil {
		return r, err
	}
	if len(sealed) < gcm.NonceSize() {
		return r, errors.New("sealed record too short")
	}
	plain, err := gcm.Open(nil, sealed[:gcm.NonceSize()], sealed[gcm.NonceSize():], nil)
	if err != nil {
		return r, fmt.Errorf("open record: %w", err)
	}
	return r, json.Unmarshal(plain, &r)
}

func newGCM(key [32]byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key[:])
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// MemoryStore is a Store for one node. The zero value is ready to use.
type MemoryStore struct {
	// mu guards entries.
	mu      sync.Mutex
	entries map[string]memEntry
	puts    int // since the last sweep
}

type memEntry struct {
	val     []byte
	expires time.Time
}

// Claim implements Store.
func (s *MemoryStore) Claim(_ context.Context, key string, val []byte, ttl time.Duration) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if e, ok := s.entries[key]; ok && now.Before(e.expires) {
		return false, nil
	}
	s.putLocked(now, key, val, ttl)
	return true, nil
}

// Put implements Store.
func (s *MemoryStore) Put(_ context.Context, key string, val []byte, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.putLocked(time.Now(), key, val, ttl)
	return nil
}

// Get implements Store.
func (s *MemoryStore) Get(_ context.Context, key string, ttl time.Duration) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	e, ok := s.entries[key]
	if !ok || !now.Before(e.expires) {
		return nil, nil
	}
	e.expires = now.Add(ttl)
	s.entries[key] = e
	return e.val, nil
}

// putLocked stores an entry; every so many puts it drops the expired
// ones, so the map holds the live threads and at most as many dead.
func (s *MemoryStore) putLocked(now time.Time, key string, val []byte, ttl time.Duration) {
	if s.entries == nil {
		s.entries = map[string]memEntry{}
	}
	s.entries[key] = memEntry{val: val, expires: now.Add(ttl)}
	if s.puts++; s.puts >= len(s.entries) {
		s.puts = 0
		for k, e := range s.entries {
			if !now.Before(e.expires) {
				delete(s.entries, k)
			}
		}
	}
}

// RedisStore is a Store in Redis, shared by every node using it.
type RedisStore struct {
	rdb redis.UniversalClient
}

// NewRedisStore returns a Store keeping the records in rdb.
func NewRedisStore(rdb redis.UniversalClient) *RedisStore { return &RedisStore{rdb: rdb} }

// Claim implements Store.
func (s *RedisStore) Claim(ctx context.Context, key string, val []byte, ttl time.Duration) (bool, error) {
	err := s.rdb.SetArgs(ctx, key, val, redis.SetArgs{Mode: "NX", TTL: ttl}).Err()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("claim thread: %w", err)
	}
	return true, nil
}

// Put implements Store.
func (s *RedisStore) Put(ctx context.Context, key string, val []byte, ttl time.Duration) error {
	if err := s.rdb.Set(ctx, key, val, ttl).Err(); err != nil {
		return fmt.Errorf("store thread: %w", err)
	}
	return nil
}

// Get implements Store.
func (s *RedisStore) Get(ctx context.Context, key string, ttl time.Duration) ([]byte, error) {
	b, err := s.rdb.GetEx(ctx, key, ttl).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read thread: %w", err)
	}
	return b, nil
}
