"""Work queues (client-go's layers: queue -> delaying -> rate-limiting), rate limiters and the one
exponential backoff, and the queue metrics provider. Imports transport and utilities only."""
