package module

import "fmt"

// playgroundIngress validates an io.statefun.playground.v1/ingress spec,
// {port: int}, and adds the ingress to the module.
func (p *parser) playgroundIngress(d *doc, kf, spec field, pos Position) {
	if p.ingress != nil {
		d.errorf(kf.node, kf.path, "a module has at most one playground ingress (its id %s is fixed); the first is in document %d (%s)",
			PlaygroundIngressID, p.ingress.Document, p.ingress)
		return
	}
	p.ingress = &pos
	o, ok := d.requireObject(spec)
	if !ok {
		return
	}
	d.knownFields(o, []string{"port"}, nil)
	port, ok := p.port(d, o, fmt.Sprintf("the playground ingress in document %d (%s)", d.num, pos))
	if !ok {
		return
	}
	p.mod.Ingresses = append(p.mod.Ingresses, &PlaygroundIngress{Port: port, Pos: pos})
}

// playgroundEgress validates an io.statefun.playground.v1/egress spec,
// {port: int, topics: [string]}, and adds the egress to the module.
func (p *parser) playgroundEgress(d *doc, kf, spec field, pos Position) {
	if p.egress != nil {
		d.errorf(kf.node, kf.path, "a module has at most one playground egress (its id %s is fixed); the first is in document %d (%s)",
			PlaygroundEgressID, p.egress.Document, p.egress)
		return
	}
	p.egress = &pos
	o, ok := d.requireObject(spec)
	if !ok {
		return
	}
	d.knownFields(o, []string{"port", "topics"}, nil)
	before := len(p.errs)
	port, _ := p.port(d, o, fmt.Sprintf("the playground egress in document %d (%s)", d.num, pos))

	// StateFun reads topics into a Set, so repeats collapse.
	var topics []string
	seen := make(map[string]bool)
	tf := o.get("topics")
	if d.present(tf) {
		if items, ok := d.list(tf); ok {
			for _, it := range items {
				s, ok := d.str(it)
				if !ok {
					continue
				}
				if s == "" {
					d.errorf(it.node, it.path, "a topic must not be empty")
					continue
				}
				if !seen[s] {
					seen[s] = true
					topics = append(topics, s)
				}
			}
		}
	}
	if len(p.errs) > before {
		return
	}
	p.mod.Egresses = append(p.mod.Egresses, &PlaygroundEgress{Port: port, Topics: topics, Pos: pos})
}

// port reads the required port of a playground component and claims it for
// user, which names the component in a later conflict.
func (p *parser) port(d *doc, o object, user string) (int, bool) {
	f := o.get("port")
	if !d.present(f) {
		return 0, false
	}
	v, ok := d.integer(f, 1, 65535)
	if !ok {
		return 0, false
	}
	port := int(v)
	if other, taken := p.ports[port]; taken {
		d.errorf(f.node, f.path, "port %d is already used by %s", port, other)
		return 0, false
	}
	p.ports[port] = user
	return port, true
}
