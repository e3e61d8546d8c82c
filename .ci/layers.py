#!/usr/bin/env python3
"""Counts the library's module-to-module imports (distinct file -> top-level
module pairs through `crate::` paths, a root re-export such as `crate::Shared`
counting as its module's; unit tests left out) and the ones that go from a lower layer
up to a higher one; exits 1 when an upward import appears beyond the allowed
one (error.rs names the strategies in its message through config)."""
import re,os,sys
root=sys.argv[1] if len(sys.argv)>1 else os.path.join(os.path.dirname(__file__),'..','src')
# layer of a top-level module: higher number = higher layer
layer={'index':0,'int':0,'sync':0,'token':0,'limits':1,'error':1,'drafter':1,'config':2,'stats':1,'verify':1,'strategies':3,'shared':4,'speculative':5,'step':6,'lib':7}
def modof(path):
    p=os.path.relpath(path,root).replace('\\','/')
    top=p.split('/')[0].replace('.rs','')
    return top
# Names the crate root re-exports (`crate::Shared` is the shared module's):
# `pub use module::{A, B}` and `pub use module::A` in lib.rs.
reexport={}
for m_,names in re.findall(r'pub use ([a-z_]+)::(\{[^}]*\}|[A-Za-z_]+);',open(os.path.join(root,'lib.rs')).read()):
    for n in re.findall(r'[A-Za-z_]+',names): reexport[n]=m_
def top_of(name):
    """The top-level module a `crate::name` path leads to."""
    return name if name in layer else reexport.get(name)
pairs=set(); up=set()
for d,_,fs in os.walk(root):
    for f in fs:
        if not f.endswith('.rs'): continue
        path=os.path.join(d,f); m=modof(path)
        if m=='lib': continue
        # Unit tests may drive a module from above: a file of tests, and a
        # `#[cfg(test)] mod tests` (kept last in a file), are left out.
        if f in ('tests.rs','loom_tests.rs'): continue
        text=re.split(r'\n#\[cfg\([^\n]*test[^\n]*\)\]\nmod tests',open(path).read())[0]
        src='\n'.join(l for l in text.split('\n') if not l.lstrip().startswith(('///','//!','//')))
        # crate::x paths, including within use { } groups
        for use in re.findall(r'use crate::(\{[^;]*\}|[^;]*);',src,re.S):
            if use.startswith('{'):
                tops=re.findall(r'(?:^|[{,]\s*)([A-Za-z_]+)',use[1:])
            else:
                tops=[re.match(r'([A-Za-z_]+)',use).group(1)]
            for t in map(top_of,tops):
                if t and t!=m:
                    pairs.add((os.path.relpath(path,root),t))
                    if layer[t]>layer.get(m,0): up.add((os.path.relpath(path,root),t))
        # Paths in code and in nested `use` lines: `crate::shared::X`,
        # `crate::Shared` (a root re-export).
        for name in re.findall(r'(?<!use )crate::([A-Za-z_]+)\b',src):
            t=top_of(name)
            if t and t!=m: pairs.add((os.path.relpath(path,root),t))
            if t and t!=m and layer[t]>layer.get(m,0): up.add((os.path.relpath(path,root),t))
print('module-to-module imports (file, module) pairs:',len(pairs))
print('upward (lower layer -> higher):',len(up))
for u in sorted(up): print('  up',u)

allowed={('error.rs','config')}
if up-allowed:
    print('upward imports beyond the allowed ones:',sorted(up-allowed)); sys.exit(1)
