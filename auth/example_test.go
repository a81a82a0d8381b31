package auth_test

import (
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/baton-run/baton/auth"
)

// A server verifying HS256 JWTs, and a browser passing one as a
// subprotocol (new WebSocket(url, ["baton", "baton.bearer." + token])).
func Example() {
	secret := []byte("a secret of at least thirty-two bytes")
	v, err := auth.NewJWT(secret, nil)
	if err != nil {
		panic(err)
	}
	token, _ := auth.SignHS256(secret, map[string]any{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix()})

	r := httptest.NewRequest("GET", "/ws", nil)
	r.Header.Set("Sec-WebSocket-Protocol", auth.Subprotocol+", "+auth.BearerPrefix+token)
	id, err := auth.Authenticator(v)(r)
	fmt.Println(id.Subject, err)
	// Output: alice <nil>
}
