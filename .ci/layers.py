#!/usr/bin/env python3
"""Counts the library's module-to-module imports (distinct file -> top-level
module pairs through `crate::` paths) and the ones that go from a lower layer
up to a higher one; exits 1 when an upward import appears beyond the allowed
one (error.rs names the strategies in its message through config)."""
import re,os,sys
root=sys.argv[1] if len(sys.argv)>1 else os.path.join(os.path.dirname(__file__),'..','src')
# layer of a top-level module: higher number = higher layer
layer={'index':0,'sync':0,'token':0,'limits':1,'error':1,'drafter':1,'config':2,'stats':1,'verify':1,'strategies':3,'shared':4,'speculative':5,'replay':6,'lib':7}
def modof(path):
    p=os.path.relpath(path,root).replace('\\','/')
    top=p.split('/')[0].replace('.rs','')
    return top
pairs=set(); up=set()
for d,_,fs in os.walk(root):
    for f in fs:
        if not f.endswith('.rs'): continue
        path=os.path.join(d,f); m=modof(path)
        if m=='lib': continue
        src='\n'.join(l for l in open(path).read().split('\n') if not l.lstrip().startswith(('///','//!','//')))
        # crate::x paths, including within use { } groups
        for use in re.findall(r'use crate::(\{[^;]*\}|[^;]*);',src,re.S):
            if use.startswith('{'):
                tops=re.findall(r'(?:^|[{,]\s*)([a-z_]+)',use[1:])
            else:
                tops=[re.match(r'([A-Za-z_]+)',use).group(1)]
            for t in tops:
                if t in layer and t!=m:
                    pairs.add((os.path.relpath(path,root),t))
                    if layer[t]>layer.get(m,0): up.add((os.path.relpath(path,root),t))
        for t in re.findall(r'(?<!use )crate::([a-z_]+)::',src):
            if t in layer and t!=m: pairs.add((os.path.relpath(path,root),t))
            if t in layer and t!=m and layer[t]>layer.get(m,0): up.add((os.path.relpath(path,root),t))
print('module-to-module imports (file, module) pairs:',len(pairs))
print('upward (lower layer -> higher):',len(up))
for u in sorted(up): print('  up',u)

allowed={('error.rs','config')}
if up-allowed:
    print('upward imports beyond the allowed ones:',sorted(up-allowed)); sys.exit(1)
