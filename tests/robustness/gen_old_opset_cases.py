#!/usr/bin/env python3
"""Old-opset operator cases for the opset normalizer (compiler/onnx/normalize.cc).

Writes one ONNX backend-test style directory per case (model.onnx + test_data_set_0) into
OUT_DIR: each model uses an operator in a pre-opset-21 form (attributes that became inputs,
legacy broadcasting, Upsample, Resize-10, coerced Softmax, GroupNormalization-18, ...) and
its expected output is computed here with numpy from the old operator's specification. The
ctest entry normalize_old_opsets runs `kiln check OUT_DIR` on them.

    gen_old_opset_cases.py OUT_DIR
"""
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

OUT = sys.argv[1]
shutil.rmtree(OUT, ignore_errors=True)


def elem_type(dtype):
    return onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[np.dtype(dtype)]


def case(name, opset, nodes, inputs, outputs, inits=()):
    """One test dir: nodes at `opset`, named numpy inputs/outputs, initializers."""
    d = os.path.join(OUT, name)
    os.makedirs(d + '/test_data_set_0')
    ins = [helper.make_tensor_value_info(k, elem_type(v.dtype), v.shape) for k, v in inputs]
    outs = [helper.make_tensor_value_info(k, elem_type(v.dtype), None) for k, v in outputs]
    g=helper.make_graph(nodes, name, ins, outs, initializer=[numpy_helper.from_array(v,k) for k,v in inits])
    m=helper.make_model(g, opset_imports=[helper.make_opsetid('',opset)]); m.ir_version=3 if opset<8 else 6
    onnx.save(m, d+'/model.onnx')
    for i,(k,v) in enumerate(inputs): open(f'{d}/test_data_set_0/input_{i}.pb','wb').write(numpy_helper.from_array(v,k).SerializeToString())
    for i,(k,v) in enumerate(outputs): open(f'{d}/test_data_set_0/output_{i}.pb','wb').write(numpy_helper.from_array(v,k).SerializeToString())
N=helper.make_node
rng=np.random.default_rng(0)
x=rng.standard_normal((2,3,4)).astype(np.float32)
case('squeeze1',1,[N('Relu',['x'],['r']),N('Squeeze',['r'],['y'],axes=[0])],[('x',x[:1])],[('y',np.maximum(x[:1],0)[0])])
case('unsqueeze11',11,[N('Relu',['x'],['r']),N('Unsqueeze',['r'],['y'],axes=[0,-1])],[('x',x)],[('y',np.maximum(x,0)[None,...,None])])
case('reducemean11',11,[N('ReduceMean',['x'],['y'],axes=[1],keepdims=0)],[('x',x)],[('y',x.mean(1))])
case('reducesum1_all',1,[N('ReduceSum',['x'],['y'],keepdims=1)],[('x',x)],[('y',x.sum(keepdims=True))])
case('split2',2,[N('Split',['x'],['a','b'],axis=2,split=[1,3])],[('x',x)],[('a',x[:,:,:1]),('b',x[:,:,1:])])
case('split11_equal',11,[N('Split',['x'],['a','b'],axis=2)],[('x',x)],[('a',x[:,:,:2]),('b',x[:,:,2:])])
case('clip6',6,[N('Relu',['x'],['r']),N('Clip',['x'],['y'],min=-0.5,max=0.5)],[('x',x)],[('y',np.clip(x,-0.5,0.5))])
case('clip6_inter',6,[N('Neg',['x'],['r']),N('Clip',['r'],['y'],max=0.5)],[('x',x)],[('y',np.minimum(-x,0.5))])
case('pad2',2,[N('Neg',['x'],['r']),N('Pad',['r'],['y'],pads=[0,1,0,0,0,2],value=1.5)],[('x',x)],[('y',np.pad(-x,((0,0),(1,0),(0,2)),constant_values=1.5))])
case('pad2_reflect',2,[N('Pad',['x'],['y'],mode='reflect',pads=[0,0,1,0,0,2])],[('x',x)],[('y',np.pad(x,((0,0),(0,0),(1,2)),mode='reflect'))])
case('slice1',1,[N('Slice',['x'],['y'],starts=[1,-3],ends=[3,1000],axes=[1,2])],[('x',x)],[('y',x[:,1:3,-3:])])
case('topk1',1,[N('TopK',['x'],['v','i'],k=2)],[('x',x)],[('v',-np.sort(-x,axis=-1)[...,:2]),('i',np.argsort(-x,axis=-1,kind='stable')[...,:2].astype(np.int64))])
case('reshape1',1,[N('Reshape',['x'],['y'],shape=[6,-1])],[('x',x)],[('y',x.reshape(6,-1))])
case('dropout7_mask',7,[N('Dropout',['x'],['y','m'],ratio=0.3)],[('x',x)],[('y',x),('m',np.ones_like(x))])
case('dropout6',6,[N('Dropout',['x'],['y'],is_test=1)],[('x',x)],[('y',x)])
case('cast1',1,[N('Cast',['x'],['y'],to='INT32')],[('x',x*10)],[('y',(x*10).astype(np.int32))])
img=np.array([[[[1,2],[3,4]]]],dtype=np.float32)
case('upsample7',7,[N('Upsample',['x'],['y'],scales=[1.,1.,2.,3.])],[('x',img)],[('y',np.repeat(np.repeat(img,2,2),3,3))])
case('upsample1_nearest',1,[N('Upsample',['x'],['y'],height_scale=2.,width_scale=2.)],[('x',img)],[('y',np.repeat(np.repeat(img,2,2),2,3))])
lin=np.array([[[[1,1.5,2,2],[2,2.5,3,3],[3,3.5,4,4],[3,3.5,4,4]]]],dtype=np.float32)
case('upsample9_linear',9,[N('Upsample',['x','s'],['y'],mode='linear')],[('x',img)],[('y',lin)],inits=[('s',np.array([1,1,2,2],np.float32))])
d8=np.array([[[[1,2,3,4],[5,6,7,8]]]],dtype=np.float32)
case('resize10_down_nearest',10,[N('Resize',['x','s'],['y'])],[('x',d8)],[('y',np.array([[[[1,3]]]],np.float32))],inits=[('s',np.array([1,1,0.6,0.6],np.float32))])
case('resize10_down_linear',10,[N('Resize',['x','s'],['y'],mode='linear')],[('x',d8)],[('y',np.array([[[[1,2.6666665]]]],np.float32))],inits=[('s',np.array([1,1,0.6,0.6],np.float32))])
case('resize10_up_nearest',10,[N('Resize',['x','s'],['y'])],[('x',img)],[('y',np.repeat(np.repeat(img,2,2),3,3))],inits=[('s',np.array([1,1,2,3],np.float32))])
# mixed: rows x2 (floor), cols x0.5 (ceil): col j -> ceil(j/0.5)=2j
mix=np.repeat(d8[:,:,:,[0,2]],2,2)
case('resize10_mixed',10,[N('Resize',['x','s'],['y'])],[('x',d8)],[('y',mix)],inits=[('s',np.array([1,1,2,0.5],np.float32))])
def softmax2d(a,axis):
    s=a.reshape(int(np.prod(a.shape[:axis])),-1); e=np.exp(s-s.max(1,keepdims=True)); return (e/e.sum(1,keepdims=True)).reshape(a.shape)
case('softmax1_axis1',1,[N('Neg',['x'],['r']),N('Softmax',['r'],['y'])],[('x',x)],[('y',softmax2d(-x,1))])
case('logsoftmax11_axis0',11,[N('LogSoftmax',['x'],['y'],axis=0)],[('x',x)],[('y',np.log(softmax2d(x,0)))])
hm=softmax2d(x,1).reshape(2,-1); h=np.zeros_like(hm); h[np.arange(2),hm.argmax(1)]=1
case('hardmax11',11,[N('Hardmax',['x'],['y'])],[('x',x)],[('y',h.reshape(x.shape))])
a4=rng.standard_normal((2,3,4,5)).astype(np.float32); b=rng.standard_normal((3,4)).astype(np.float32)
case('add6_axis',6,[N('Neg',['a'],['r']),N('Add',['r','b'],['y'],broadcast=1,axis=1)],[('a',a4)],[('y',-a4+b[None,:,:,None])],inits=[('b',b)])
case('mul6_axis_input',6,[N('Mul',['a','b'],['y'],broadcast=1,axis=1)],[('a',a4),('b',b)],[('y',a4*b[None,:,:,None])])
case('sub6_suffix',6,[N('Sub',['a','b'],['y'],broadcast=1)],[('a',a4),('b',a4[0,0])],[('y',a4-a4[0,0])])
case('gemm6',6,[N('Gemm',['a','b','c'],['y'],broadcast=1,transB=1,alpha=0.5)],[('a',x[0])],[('y',0.5*(x[0]@x[1].T)+np.arange(3,dtype=np.float32))],inits=[('b',x[1]),('c',np.arange(3,dtype=np.float32))])
sc=np.array([1,2,3],np.float32); bi=np.array([.1,.2,.3],np.float32); mu=np.array([.5,0,-.5],np.float32); var=np.array([1,2,3],np.float32)
bn=(a4-mu[:,None,None])/np.sqrt(var[:,None,None]+1e-5)*sc[:,None,None]+bi[:,None,None]
case('bn6',6,[N('BatchNormalization',['a','s','b','m','v'],['y','mo','vo','sm','sv'],is_test=1,consumed_inputs=[0,0,0,1,1])],[('a',a4)],[('y',bn)],inits=[('s',sc),('b',bi),('m',mu),('v',var)])
S=rng.random((3,4,5)).astype(np.float32)+0.5; M=rng.random((3,4,5)).astype(np.float32)
bn0=(a4-M)/np.sqrt(S+1e-5)*S+M
case('bn7_spatial0',7,[N('BatchNormalization',['a','s','b','m','v'],['y'],spatial=0)],[('a',a4)],[('y',bn0)],inits=[('s',S),('b',M),('m',M),('v',S)])
sl=np.array([0.1,0.2,0.3],np.float32)
case('prelu6',6,[N('PRelu',['a','s'],['y'])],[('a',a4)],[('y',np.where(a4<0,a4*sl[:,None,None],a4))],inits=[('s',sl)])
case('concat1',1,[N('Concat',['x','x'],['y'])],[('x',x)],[('y',np.concatenate([x,x],1))])
case('tile1',1,[N('Tile',['x','t','ax'],['y'])],[('x',x)],[('y',np.tile(x,(1,2,1)))],inits=[('t',np.array(2,np.int64)),('ax',np.array(1,np.int64))])
data=np.zeros((3,3),np.float32); idx=np.array([[1,0,2],[0,2,1]],np.int64); upd=np.array([[1,1.1,1.2],[2,2.1,2.2]],np.float32)
exp=data.copy()
for i in range(2):
  for j in range(3): exp[idx[i,j],j]=upd[i,j]
case('scatter9',9,[N('Scatter',['d','i','u'],['y'],axis=0)],[('d',data),('i',idx),('u',upd)],[('y',exp)])
X=rng.standard_normal((2,4,3)).astype(np.float32); G=2
sg=np.array([1.5,-1],np.float32); bg=np.array([.2,.4],np.float32)
xr=X.reshape(2,G,-1); nrm=((xr-xr.mean(-1,keepdims=True))/np.sqrt(xr.var(-1,keepdims=True)+1e-5)).reshape(X.shape)
ref=nrm*np.repeat(sg,2)[None,:,None]+np.repeat(bg,2)[None,:,None]
case('groupnorm18_const',18,[N('GroupNormalization',['x','s','b'],['y'],num_groups=2)],[('x',X)],[('y',ref)],inits=[('s',sg),('b',bg)])
case('groupnorm18_input',18,[N('GroupNormalization',['x','s','b'],['y'],num_groups=2)],[('x',X),('s',sg),('b',bg)],[('y',ref)])
src=np.arange(16,dtype=np.float32).reshape(1,1,4,4)
def tfhp(n_in,scale,n_out,mode):
    o=[]
    for x in range(n_out):
        v=(x+0.5)/scale
        i=int(np.floor(v)) if mode=='floor' else int(np.ceil(v-0.5))
        o.append(min(max(i,0),n_in-1))
    return o
for mode in ('floor','round_prefer_floor'):
    r=tfhp(4,1.5,6,mode); ref=src[:,:,r][:,:,:,r]
    case('resize11_tfhp_'+mode,11,[N('Resize',['x','roi','s'],['y'],coordinate_transformation_mode='tf_half_pixel_for_nn',nearest_mode=mode)],[('x',src)],[('y',ref)],inits=[('roi',np.array([],np.float32)),('s',np.array([1,1,1.5,1.5],np.float32))])
print(f'{len(os.listdir(OUT))} old-opset cases written to {OUT}')
