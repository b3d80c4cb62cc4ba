package kafkaclient

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
)

// certPool reads every PEM certificate in data into a pool.
func certPool(data []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	n := 0
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("an invalid certificate: %v", err)
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, errNoCert
	}
	return pool, nil
}

// skipHostnameCheck makes c verify the broker's certificate chain against
// its roots without checking the host name, which is what Kafka's empty
// ssl.endpoint.identification.algorithm means.
func skipHostnameCheck(c *tls.Config) {
	c.InsecureSkipVerify = true // the chain is verified below
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return fmt.Errorf("kafkaclient: the broker sent no certificate")
		}
		opts := x509.VerifyOptions{Roots: c.RootCAs, Intermediates: x509.NewCertPool()}
		for _, ic := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(ic)
		}
		_, err := cs.PeerCertificates[0].Verify(opts)
		return err
	}
}
