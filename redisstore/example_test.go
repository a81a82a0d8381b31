package redisstore_test

import (
	"context"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/redisstore"
)

// A session created on node a, then taken over by node b after a died.
// (Not run: it needs a Redis.)
func Example() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()

	a, err := redisstore.New(client, redisstore.Options{Node: "a"})
	if err != nil {
		log.Fatal(err)
	}
	if err := a.CreateSession(ctx, "s1", redisstore.SessionMeta{TokenHash: "…", Capacity: 1000}); err != nil {
		log.Fatal(err)
	}
	ring := a.NewRing("s1", 1000, redisstore.Callbacks{
		OnDurable: func(e []buffer.Entry) { /* take the session lock, send e to the client */ },
		OnLost:    func(err error) { /* stop serving the session here */ },
	})
	ring.Append(ctx, "event-id", func(seq uint64) ([]byte, error) { return []byte(`{"seq":1}`), nil })
	ring.Checkpoint([]byte("state as of seq 1"))
	ring.Commit() // the event and its checkpoint: one unit, written behind
	ring.Close()
	a.Close()

	b, err := redisstore.New(client, redisstore.Options{Node: "b"})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	if ok, err := b.Claim(ctx, "s1", "a"); err != nil || !ok {
		log.Fatal("not claimed: ", err)
	}
	taken, loaded, err := b.OpenRing(ctx, "s1", redisstore.Callbacks{})
	if err != nil {
		log.Fatal(err)
	}
	defer taken.Close()
	log.Printf("resumed at seq %d from a checkpoint of seq %d", loaded.LastSeq, loaded.CheckpointSeq)
}
