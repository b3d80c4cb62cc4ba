package stateclient

import (
	"errors"
	"net/http"
	"time"
)

// Option configures a Client; pass them to New.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// config is what the options set; defaultConfig holds every default.
type config struct {
	token      string
	httpClient *http.Client
	timeout    time.Duration
	userAgent  string
}

func defaultConfig() config {
	return config{
		timeout:   30 * time.Second,
		userAgent: "statefun-stateclient",
	}
}

func (c config) validate() error {
	if c.timeout < 0 {
		return errors.New("stateclient: WithTimeout: negative timeout")
	}
	return nil
}

// WithToken sets the bearer token sent as "Authorization: Bearer <token>" on
// every request, overriding the default of none (a server without tokens
// accepts every caller on loopback).
func WithToken(token string) Option {
	return optionFunc(func(c *config) { c.token = token })
}

// WithHTTPClient sets the HTTP client requests go through, overriding the
// default of a client of its own (http.DefaultTransport's settings with 16
// idle connections per host). Use it for https with a private CA or client
// certificates; nil keeps the default. The client is copied; its CheckRedirect is replaced by one
// that does not follow redirects (the API never redirects; a redirect is
// returned as a *ProblemError).
func WithHTTPClient(hc *http.Client) Option {
	return optionFunc(func(c *config) { c.httpClient = hc })
}

// WithTimeout sets the time limit of each request, overriding the default of
// 30s; 0 means no limit other than the context's. A Receipt long-poll gets
// its wait on top.
func WithTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.timeout = d })
}

// WithUserAgent sets the User-Agent header, overriding the default of
// "statefun-stateclient".
func WithUserAgent(ua string) Option {
	return optionFunc(func(c *config) { c.userAgent = ua })
}
