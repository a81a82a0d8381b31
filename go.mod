module github.com/baton-run/baton

go 1.26

require (
	github.com/cenkalti/backoff/v4 v4.3.0
	github.com/coder/websocket v1.8.15
	github.com/google/uuid v1.6.0
	github.com/sashabaranov/go-openai v1.43.0
	go.uber.org/goleak v1.3.0
)
