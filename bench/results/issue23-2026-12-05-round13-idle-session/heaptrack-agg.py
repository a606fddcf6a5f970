import collections,sys
by=collections.Counter(); tot=0
for line in open(sys.argv[1]):
    stack,_,n=line.rstrip().rpartition(' '); n=int(n); tot+=n
    fr=stack.split(';')
    if any('sqlite3' in f for f in fr):
        k='sqlite:'+('pcache' if any('pcache1' in f for f in fr) else 'other'); by[k]+=n; continue
    fr=[f for f in fr if not f.startswith(('alloc','__rust','_RNv','realloc','grow','allocate','exchange_malloc','new<>','with_capacity','try_allocate','finish_grow','reserve','do_reserve','from<>','from (','into<>','from_slice','box_new','new_uninit','try_new','copy_from_slice','{closure#0}<> (sync','from_iter','collect','fallible','do_alloc','prepare_resize'))]
    key=' < '.join(f[:45] for f in reversed(fr[-int(sys.argv[2]):]))
    by[key]+=n
print(tot)
for k,v in by.most_common(int(sys.argv[3])): print(f'{v/10000:7.1f}B/s {k}')
